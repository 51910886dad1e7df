"""Training algorithms (bc, ppo, es, dqn, il) and the trainer loop."""

import os

# Intel MKL, which torch uses for float32 products on x86, picks its kernels per CPU, and
# they round differently: bc, ppo and dqn would give other policy bytes for the same seed
# on another machine (the shipped pretrained policy did not regenerate byte for byte on an
# Ice Lake CPU until this was set). COMPATIBLE runs one code path on every x86 CPU: on this
# machine it gave the same bits with MKL limited to AVX2, ATen to AVX2, and one thread or
# two. It must be set before torch loads MKL, so here, before any module of this package
# imports torch; a value the user exported wins.
os.environ.setdefault("MKL_CBWR", "COMPATIBLE")
