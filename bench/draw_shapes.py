"""Draw held-out shapes for the GPU checks of ``pptl tune`` and ``pptl whatif`` from a seed, before they run.

A shape measured to judge a model must not be chosen by whoever wrote the model: this draws it from the
issue's ranges with a seed written down beside the result, so anyone can draw the same again.

    python bench/draw_shapes.py tune SEED [N] [--pp P]   # N Shape(...) lines for bench/tune_crossval.py
    python bench/draw_shapes.py whatif SEED [--pp P]     # the bench/whatif_gpu.sh options of one call

Tune shapes (issue 35's ranges): hidden 2048-8192 (a multiple of 128), tokens 1024-8192 (of 256), 4-16
layers a stage (pp 2 by default; ``--pp 4`` on a 4-GPU machine, named ``-p4``), an embedding of 1-2 blocks
and a heavier head of 2-4, 4-32 micro-batches. A draw whose step would take over :data:`MAX_STEP_MS` at
:data:`GPU_FLOPS` (an MLP block: 16 h^2 FLOPs a token forward, twice that backward), its work spread over
the pp GPUs, is drawn again: one launch must end within the device's 10 minutes. pp 2 draws what it drew
before ``--pp`` existed (the same calls to the generator).
Whatif calls: hidden 2048-4096, tokens 1024-4096, 2-6 blocks a stage, the slowed rank any of the pp (0 or 1
at pp 2), x1.1-1.3.
"""
from __future__ import annotations

import random
import sys

#: bf16 FLOP/s one GPU sustains on these blocks (H200 and H100 both ran near 5.8e14 on h3712-t3072).
GPU_FLOPS = 5.0e14
#: Longest step a drawn tune shape may take (its 1F1B run, at GPU_FLOPS, both GPUs busy).
MAX_STEP_MS = 700.0


def step_ms(hidden: int, tokens: int, blocks: int, microbatches: int, gpus: int = 2) -> float:
    """Compute time of one step spread over ``gpus``: F, B of every block, every micro-batch."""
    return 48.0 * tokens * hidden**2 * blocks * microbatches / gpus / GPU_FLOPS * 1e3


def draw_tune(seed: int, n: int, pp: int = 2) -> list[tuple[str, int, int, int, int, int, int]]:
    """``n`` shapes as (name, hidden, tokens, layers in all, embedding blocks, head blocks, micro-batches)."""
    rng = random.Random(seed)
    out: list[tuple[str, int, int, int, int, int, int]] = []
    while len(out) < n:
        h = rng.randrange(2048, 8193, 128)
        t = rng.randrange(1024, 8193, 256)
        per_stage = rng.randint(4, 16)
        emb, head = rng.randint(1, 2), rng.randint(2, 4)
        m = rng.randint(4, 32)
        if step_ms(h, t, pp * per_stage + emb + head, m, pp) > MAX_STEP_MS:
            continue
        name = f"h{h}-t{t}-l{per_stage}-m{m}" + ("" if pp == 2 else f"-p{pp}")
        out.append((name, h, t, pp * per_stage, emb, head, m))
    return out


def draw_whatif(seed: int, pp: int = 2) -> str:
    """The options of one ``bench/whatif_gpu.sh`` call on ``pp`` GPUs (``--gpus`` added past 2)."""
    rng = random.Random(seed)
    h = rng.randrange(2048, 4097, 128)
    t = rng.randrange(1024, 4097, 256)
    layers = rng.randint(2, 6)
    rank = rng.randint(0, pp - 1)
    factor = round(rng.uniform(1.1, 1.3), 2)
    gpus = "" if pp == 2 else f" --gpus {pp}"
    return f"--hidden {h} --tokens {t} --layers {layers} --slow-rank {rank} --slow-factor {factor}{gpus}"


def main(argv: list[str]) -> int:
    pp = 2
    if len(argv) >= 2 and argv[-2] == "--pp" and argv[-1] in ("2", "4", "8"):
        pp, argv = int(argv[-1]), argv[:-2]
    if len(argv) < 2 or argv[0] not in ("tune", "whatif") or not argv[1].isdigit() \
            or len(argv) > 3 or (len(argv) > 2 and not argv[2].isdigit()) \
            or (argv[0] == "whatif" and len(argv) > 2):
        print("usage: draw_shapes.py tune SEED [N] [--pp 2|4|8] | whatif SEED [--pp 2|4|8]", file=sys.stderr)
        return 2
    seed = int(argv[1])
    if argv[0] == "whatif":
        print(draw_whatif(seed, pp))
        return 0
    for row in draw_tune(seed, int(argv[2]) if len(argv) > 2 else 2, pp):
        extra = "" if pp == 2 else f", pp={pp}"
        print(f'Shape("{row[0]}", {", ".join(str(x) for x in row[1:])}{extra}),')
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
