"""Print a config with its ``_base_`` files and ``--cfg-options`` merged in.

    python tools/analysis/print_config.py CONFIG [--cfg-options k=v ...] [--save-path F]
"""
import argparse
import sys

from mmengine.config import Config, DictAction


def parse_args(argv=None):
    p = argparse.ArgumentParser(description='Print the whole config')
    p.add_argument('config')
    p.add_argument('--cfg-options', nargs='+', action=DictAction, default={})
    p.add_argument('--save-path', help='also write it here (.py, .json or .yaml)')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    cfg = Config.fromfile(args.config)
    cfg.merge_from_dict(args.cfg_options)
    print(cfg.pretty_text)
    if args.save_path:
        cfg.dump(args.save_path)
    return 0


if __name__ == '__main__':
    sys.exit(main())
