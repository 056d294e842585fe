#!/usr/bin/env bash
# Why this file exists: the docs are a reading path (docs/README.md); a link that points
# nowhere breaks it silently. This checks every relative link and image of README.md and
# docs/*.md -- markdown `[text](path)`, `![alt](path)` and `<img src="path">` -- resolves
# to a file or folder inside the repository (anchors after '#' are ignored; http(s) and
# mailto links are not followed: nothing is downloaded).
#   bash tests/doc_links_test.sh [repository root]
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"
root=$(pwd -P)
bad=0
checked=0
for doc in README.md docs/*.md; do
  [ -f "$doc" ] || continue
  dir=$(dirname "$doc")
  # Links outside code spans and fenced blocks: strip fenced blocks first.
  links=$(awk '/^```/{fence=!fence; next} !fence' "$doc" |
    grep -oE '\]\([^)[:space:]]+\)|<img [^>]*src="[^"]+"' |
    sed -E 's/^\]\(//; s/\)$//; s/^<img [^>]*src="//; s/"$//' || true)
  while IFS= read -r link; do
    [ -n "$link" ] || continue
    case "$link" in http://* | https://* | mailto:* | \#*) continue ;; esac
    path="${link%%#*}"
    checked=$((checked + 1))
    if [ ! -e "$dir/$path" ]; then
      echo "$doc: broken link '$link' (no $dir/$path)"
      bad=$((bad + 1))
    fi
    case "$(realpath -m "$dir/$path")" in
      "$root"/* | "$root") ;;
      *) echo "$doc: link '$link' leaves the repository"; bad=$((bad + 1)) ;;
    esac
  done <<<"$links"
done
echo "doc links: $checked checked, $bad broken"
[ "$bad" -eq 0 ]
