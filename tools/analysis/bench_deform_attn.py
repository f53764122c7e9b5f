"""Moved to benchmarks/bench_deform_attn.py; this path forwards there until the next release."""
from densevit.utils.moved import forward

if __name__ == '__main__':
    forward(__file__, 'benchmarks/bench_deform_attn.py')
