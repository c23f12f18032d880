"""Issue 10, session 22: which models/skinny.py case came out wrong at 33 rows, and with which pipeline stages.

    python bench/skinny_norm_check.py        (GPU; prints a line per rows x shape x stages)

Relative error of skinny_linear against float32 math, plain and with the norm (norm_eps), at 17-64
rows for the q/k/v, o and down shapes of Orpheus-3B, with 2-6 pipeline stages; and the rows whose own
error is over 1e-2 (plain). Its output of session 22 (bench/results/skinny_norm_check_s22_h100.log)
is of the code that took the norm's squares elementwise; since session 23 they are the diagonal of
x x^T on the tensor cores, in the stages the column says.
"""
import itertools, sys
import torch, torch.nn.functional as F
sys.path.insert(0, ".")
from models.skinny import skinny_linear, skinny_tiles

def rel(out, ref):
    return ((out.float() - ref).norm() / ref.norm()).item()

hidden, inter, eps = 3072, 8192, 1e-5
g = torch.Generator(device="cuda").manual_seed(0)
W = {"qkv": (torch.randn(5120, hidden, device="cuda", generator=g) / hidden ** .5).bfloat16(),
     "o": (torch.randn(hidden, hidden, device="cuda", generator=g) / hidden ** .5).bfloat16(),
     "gu": (torch.randn(2 * inter, hidden, device="cuda", generator=g) / hidden ** .5).bfloat16(),
     "down": (torch.randn(hidden, inter, device="cuda", generator=g) / inter ** .5).bfloat16()}
for rows in (17, 33, 48, 63, 64):
    x = (torch.randn(rows, hidden, device="cuda", generator=g) * 3).bfloat16()
    h = torch.randn(rows, inter, device="cuda", generator=g).bfloat16()
    normed = F.rms_norm(x.float(), (hidden,), eps=eps)
    for name, stages in itertools.product(("qkv", "o", "down"), (6, 4, 3, 2)):
        w = W[name]
        inp = h if name == "down" else x
        tiles = (skinny_tiles(*w.shape)[0], 128, 4, stages)
        plain = rel(skinny_linear(inp, w, tiles=tiles), F.linear(inp.float(), w.float()))
        normd = rel(skinny_linear(inp, w, norm_eps=eps, tiles=tiles),
                    F.rms_norm(inp.float(), (inp.shape[1],), eps=eps) @ w.float().T)
        bad_rows = []
        out = skinny_linear(inp, w, tiles=tiles).float(); ref = F.linear(inp.float(), w.float())
        for r in range(rows):
            if rel(out[r:r+1], ref[r:r+1]) > 1e-2:
                bad_rows.append(r)
        print(f"rows {rows} {name} stages {stages}: plain {plain:.4f} norm {normd:.4f} bad rows {bad_rows[:12]}{'...' if len(bad_rows) > 12 else ''} ({len(bad_rows)})", flush=True)
