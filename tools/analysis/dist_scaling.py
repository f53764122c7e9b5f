"""Moved to benchmarks/dist_scaling.py; this path forwards there until the next release."""
from densevit.utils.moved import forward

if __name__ == '__main__':
    forward(__file__, 'benchmarks/dist_scaling.py')
