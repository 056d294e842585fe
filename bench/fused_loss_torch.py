# Why this file exists: the PyTorch side of issue 12's head-loss table, on the same shapes
# and in the same table format as bench/fused_loss_bench.cpp: naive (logits [T, V]
# materialised under autograd), chunked with autograd (the per-chunk losses under autograd:
# every chunk's logits stay saved until backward), a fused-chunked autograd.Function written
# here (per chunk: logits, loss, d loss / d logits, dh_chunk = dlogits W and, for a trainable
# head, dW += dlogits^T h_chunk in fp32; backward only scales them), and one T x D x V GEMM.
# Forward + backward, medians of --repeats after one warm-up; memory = the caching
# allocator's peak minus what was allocated before the call, and that less dh (and dW, bf16
# + fp32, as the C++ bench counts it).
#   python3 bench/fused_loss_torch.py --loss kl --head frozen --ce-weight 0.1
import argparse
import math

import torch

GIB = 1024.0**3


def row_loss(z, t, y, ce_weight, kind):
    """Per-row loss of fp32 logits z [c, V] (teacher t or None, labels y)."""
    lq = torch.log_softmax(z, dim=-1)
    loss = torch.zeros(z.shape[0], device=z.device, dtype=torch.float32)
    if kind == "kl":
        lp = torch.log_softmax(t, dim=-1)
        loss = loss + (1.0 - ce_weight) * (lp.exp() * (lp - lq)).sum(-1)
        if ce_weight > 0:
            loss = loss - ce_weight * lq.gather(1, y[:, None]).squeeze(1)
    else:
        loss = -lq.gather(1, y[:, None]).squeeze(1)
    return loss


def naive(h, w, th, y, a):
    z = (h @ w.t()).float()
    t = (th @ w.t()).float() if a.loss == "kl" else None
    return row_loss(z, t, y, a.ce_weight, a.loss).mean()


def chunked(h, w, th, y, a):
    total = 0
    for r0 in range(0, h.shape[0], a.chunk):
        hc = h[r0 : r0 + a.chunk]
        z = (hc @ w.t()).float()
        t = None
        if a.loss == "kl":
            with torch.no_grad():
                t = (th[r0 : r0 + a.chunk] @ w.t()).float()
        total = total + row_loss(z, t, y[r0 : r0 + a.chunk], a.ce_weight, a.loss).sum()
    return total / h.shape[0]


class FusedChunked(torch.autograd.Function):
    """Grads per chunk in forward; backward scales dh (and dW) by the incoming scalar."""

    @staticmethod
    def forward(ctx, h, w, th, y, chunk, kind, ce_weight):
        n = h.shape[0]
        dh = torch.empty_like(h)
        dw = torch.zeros(w.shape, dtype=torch.float32, device=w.device) if w.requires_grad else None
        total = torch.zeros((), dtype=torch.float32, device=h.device)
        for r0 in range(0, n, chunk):
            hc = h[r0 : r0 + chunk]
            yc = y[r0 : r0 + chunk]
            z = (hc @ w.t()).float()
            lq = torch.log_softmax(z, dim=-1)
            q = lq.exp()
            g = torch.zeros_like(z)
            if kind == "kl":
                lp = torch.log_softmax((th[r0 : r0 + chunk] @ w.t()).float(), dim=-1)
                p = lp.exp()
                total += (1.0 - ce_weight) * (p * (lp - lq)).sum()
                g += (1.0 - ce_weight) * (q - p)
                del p, lp
                if ce_weight > 0:
                    total -= ce_weight * lq.gather(1, yc[:, None]).sum()
                    g += ce_weight * q
                    g.scatter_add_(1, yc[:, None], torch.full((yc.shape[0], 1), -ce_weight, device=z.device))
            else:
                total -= lq.gather(1, yc[:, None]).sum()
                g += q
                g.scatter_add_(1, yc[:, None], torch.full((yc.shape[0], 1), -1.0, device=z.device))
            del z, lq, q
            g = (g / n).to(h.dtype)
            dh[r0 : r0 + chunk] = g @ w
            if dw is not None:
                dw.add_(g.t() @ hc)  # fp32 accumulator += a bf16 product
            del g
        ctx.save_for_backward(dh, dw if dw is not None else torch.empty(0))
        ctx.has_dw = dw is not None
        return total / n

    @staticmethod
    def backward(ctx, grad):
        dh, dw = ctx.saved_tensors
        gdw = (dw * grad).to(torch.bfloat16) if ctx.has_dw else None
        return dh * grad.to(dh.dtype), gdw, None, None, None, None, None


def fused(h, w, th, y, a):
    return FusedChunked.apply(h, w, th, y, a.chunk, a.loss, a.ce_weight)


def timed(fn, h, w, th, y, a, grad_bytes):
    ms = []
    peak = 0.0
    try:
        for r in range(a.repeats + 1):
            h.grad = None
            w.grad = None
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            loss = fn(h, w, th, y, a)
            loss.backward()
            e.record()
            torch.cuda.synchronize()
            if r > 0:
                ms.append(s.elapsed_time(e))
            peak = torch.cuda.max_memory_allocated() - base
            del loss
    except torch.OutOfMemoryError as err:
        h.grad = None
        w.grad = None
        torch.cuda.empty_cache()
        return None, str(err).split("\n")[0]
    h.grad = None
    w.grad = None
    torch.cuda.empty_cache()
    ms.sort()
    return (ms[len(ms) // 2], peak / GIB, (peak - grad_bytes) / GIB), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=24576)
    ap.add_argument("--D", type=int, default=5120)
    ap.add_argument("--V", type=int, default=248320)
    ap.add_argument("--loss", default="kl", choices=["kl", "ce"])
    ap.add_argument("--head", default="frozen", choices=["frozen", "trainable"])
    ap.add_argument("--ce-weight", type=float, default=0.0)
    ap.add_argument("--paths", default="fused,chunked,naive")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=2048)
    a = ap.parse_args()
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(1)
    h = torch.randn(a.T, a.D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    w = (torch.randn(a.V, a.D, device=dev, dtype=torch.bfloat16, generator=g) / math.sqrt(a.D))
    w.requires_grad_(a.head == "trainable")
    th = torch.randn(a.T, a.D, device=dev, dtype=torch.bfloat16, generator=g) if a.loss == "kl" else None
    y = torch.randint(0, a.V, (a.T,), device=dev, generator=g)
    grad_bytes = h.numel() * 2 + (w.numel() * 6 if a.head == "trainable" else 0)
    print(f"PyTorch {torch.__version__}, {torch.cuda.get_device_name()}, bf16, T={a.T} D={a.D} V={a.V}, "
          f"{'forward KL' if a.loss == 'kl' else 'CE'}{f' + {a.ce_weight} CE' if a.loss == 'kl' and a.ce_weight else ''}, "
          f"head {a.head}, chunk {a.chunk} rows, median of {a.repeats}")
    # One T x D x V GEMM (bf16 out), as torch.matmul runs it.
    x = torch.empty(a.T, a.V, device=dev, dtype=torch.bfloat16)
    wd = w.detach()
    torch.matmul(h.detach(), wd.t(), out=x)
    ms = []
    for _ in range(a.repeats):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.matmul(h.detach(), wd.t(), out=x)
        e.record()
        torch.cuda.synchronize()
        ms.append(s.elapsed_time(e))
    del x
    torch.cuda.empty_cache()
    gemm = sorted(ms)[len(ms) // 2]
    print(f"{'path':30s} {'chunk':>7s} {'ms':>10s} {'x 1 GEMM':>9s} {'peak GiB':>12s} {'peak-grads GiB':>16s}")
    tflops = 2.0 * a.T * a.D * a.V / (gemm * 1e-3) / 1e12
    print(f"{'torch one TxDxV GEMM':30s} {'-':>7s} {gemm:10.2f} {1.0:9.3f} {'-':>12s} {'-':>16s}  ({tflops:.0f} TFLOP/s)")
    fns = {"naive": naive, "chunked": chunked, "fused": fused}
    for name in a.paths.split(","):
        res, err = timed(fns[name], h, w, th, y, a, grad_bytes)
        label = f"torch {name}" + (" (autograd.Function)" if name == "fused" else "")
        chunk = "-" if name == "naive" else str(a.chunk)
        if err:
            print(f"{label:30s} out of memory: {err}")
        else:
            print(f"{label:30s} {chunk:>7s} {res[0]:10.2f} {res[0] / gemm:9.3f} {res[1]:12.2f} {res[2]:16.2f}")


if __name__ == "__main__":
    main()
