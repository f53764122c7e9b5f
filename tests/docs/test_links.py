"""The documentation points at files that exist.

For README.md, every ``docs/*.md``, ``configs/studies/README.md`` and ``benchmarks/README.md``:

- every relative Markdown link ``[text](path)``, image ``![alt](path)``, reference
  definition ``[ref]: path`` and HTML ``src=`` / ``href=`` outside code resolves, relative
  to the file, to a file or folder of the repository (``#anchors`` stripped;
  ``http(s)://``, ``mailto:`` and in-page ``#anchor`` links skipped);
- no file refers to the folder beside the repository that holds the project's notes
  (a user's clone does not have it);
- every command in a code span or code block that runs a script, ``python PATH.py`` or
  ``bash PATH.sh``, or that starts with a script path and arguments (``tools/train.py
  CONFIG``), names a script that exists, relative to the repository root; so do the
  ``configs/`` / ``tools/`` / ``benchmarks/`` ``.py`` / ``.sh`` arguments of such a
  command. ``{a,b}`` alternatives are expanded; paths with placeholders (``<tool>``,
  ``$VAR``, ``*``) are skipped. A file the same page defines (a code block whose first
  line is ``# path/to/file.py``) counts as existing: it is what the reader writes;
- a path pattern in code under a top-level folder of the repository
  (``tests/checkpoint/test_convert_*.py``) matches at least one file;
- every repository path in code (a code span or a code-block line) exists, as a file or a
  folder. A repository path is a piece of code that starts, after a space, a quote, ``(``,
  ``=`` or the start of the code, with one of the repository's top-level source folders
  (``configs/``, ``tools/``, ``benchmarks/``, ``densevit/``, ``tests/``, ``docs/``) and runs
  to the next space, quote, ``(``, ``)``, ``:``, ``;`` or ``,`` (a trailing ``.`` dropped):
  ``densevit/engine/cli.py``, ``tests/faults/``, the file in
  ``densevit/models/tta/support.py: apply_tta`` or ``tests/x.py::test_y``. ``{a,b}`` and
  ``{0..5}`` alternatives are expanded. Not repository paths, so not checked: a path with a
  placeholder (``*``, ``<...>``, ``$VAR``, ``[...]``, ``...``, or a word in capitals such as
  ``NAME``, ``CONFIG`` or the ``N`` of ``iter_N.pth``; ``README`` is a name, not a
  placeholder; a name starting with ``my_``, the reader's own file such as
  ``densevit/datasets/my_data.py``), a path under any other folder (outputs and inputs
  such as ``work_dirs/``, ``data/``, ``checkpoints/``), a path relative to a package
  (``models/detr.py``) and a dotted module name (``densevit.engine.cli``). A file the page
  defines counts as existing.

Scripts that moved keep a forwarder at the old path for one release
(``densevit/utils/moved.py``); the forwarders are files, so commands naming them pass.
"""
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ['README.md', 'configs/studies/README.md', 'benchmarks/README.md'] + sorted(
    p.relative_to(ROOT).as_posix() for p in (ROOT / 'docs').glob('*.md'))

FENCE = re.compile(r'^\s*(```|~~~)')
CODE_SPAN = re.compile(r'(`+)(.+?)\1')
LINK = re.compile(r'!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+["\'(][^)]*)?\)')
REF_DEF = re.compile(r'^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)')
HTML_ATTR = re.compile(r'\b(?:src|href)\s*=\s*["\']([^"\']+)["\']')
SKIP_SCHEMES = ('http://', 'https://', 'mailto:')
RUN = re.compile(r'(?:^|[\s;(&|])(?:python3?|bash)\s+([^\s`\'"]+\.(?:py|sh))(?=$|[\s`\'";)|&])')
LEADING_SCRIPT = re.compile(r'^\s*([\w./{},-]+/[\w./{},-]*\.(?:py|sh))\s+\S')
ARG = re.compile(r'(?<![\w./-])((?:configs|tools|benchmarks)/[^\s`\'"]+\.(?:py|sh))(?![\w/])')
DEFINES = re.compile(r'^\s*#\s*(\S+\.(?:py|sh))\s*$')
PLACEHOLDER = re.compile(r'[<>*$\[\]]|\.\.\.')
TOP = ('configs', 'tools', 'benchmarks', 'densevit', 'tests', 'docs')
GLOB = re.compile(r'(?<![\w./-])((?:' + '|'.join(TOP) + r')/[\w./{},-]*\*[\w./*{},-]*)')
REPO_PATH = re.compile(r'(?:^|(?<=[\s\'"(=]))((?:' + '|'.join(TOP) +
                       r')/(?:[^\s\'"():;,{}]|\{[^{}\s]*\})*)')
# a placeholder in a path: the command check's, a word in capitals (README excepted), or
# the reader's own file (my_...)
PATH_PLACEHOLDER = re.compile(r'[<>*$\[\]]|\.\.\.|(?<![A-Za-z])(?!README(?![A-Za-z]))[A-Z][A-Z0-9]*'
                              r'(?![a-z])|(?<![\w-])my_')

# the project's notes beside the repository (spelt in two parts so that this file itself
# does not trip the same check in the before-stop hook)
OUTSIDE = '/'.join(('..', 'shared'))


def expand_braces(path):
    """``a/{b,c}.py`` -> ``['a/b.py', 'a/c.py']`` (nested and repeated groups too), and
    ``b{0..2}`` -> ``b0``, ``b1``, ``b2``."""
    m = re.search(r'\{([^{}]*)\}', path)
    if not m:
        return [path]
    out = []
    span = re.fullmatch(r'(\d+)\.\.(\d+)', m.group(1))
    alts = ([str(i) for i in range(int(span[1]), int(span[2]) + 1)] if span
            else m.group(1).split(','))
    for alt in alts:
        out += expand_braces(path[:m.start()] + alt + path[m.end():])
    return out


def scan(text):
    """(prose lines, code pieces, defined files) of a Markdown text.

    prose: (line number, line with code spans blanked) outside code blocks; code:
    (line number, text) for each code span and each code-block line (fenced, or
    indented by 4 spaces after a blank line), ``\\``-continued lines joined; defined:
    the paths named by a ``# path.py`` first line of a code block.
    """
    prose, code, defined = [], [], set()
    in_fence = in_indented = False
    prev_blank, first = True, False
    pending = None  # a continued code line: (line number, text so far)

    def code_line(no, line):
        nonlocal pending, first
        if first:
            m = DEFINES.match(line)
            if m:
                defined.add(m.group(1))
            first = False
        start, body = pending if pending else (no, '')
        body = f'{body} {line.strip()}'.strip()
        if body.endswith('\\'):
            pending = (start, body[:-1].rstrip())
        else:
            code.append((start, body))
            pending = None

    for no, line in enumerate(text.split('\n'), 1):
        if FENCE.match(line):
            in_fence, in_indented, first = not in_fence, False, not in_fence
            if pending:
                code.append(pending)
                pending = None
            prev_blank = False
            continue
        if in_fence:
            code_line(no, line)
            continue
        blank = not line.strip()
        if not blank and line.startswith(('    ', '\t')) and (prev_blank or in_indented):
            first = first or not in_indented
            in_indented = True
            code_line(no, line)
            prev_blank = False
            continue
        if not blank:
            in_indented = False
        if pending:
            code.append(pending)
            pending = None
        for m in CODE_SPAN.finditer(line):
            code.append((no, m.group(2)))
        prose.append((no, CODE_SPAN.sub(lambda m: ' ' * len(m.group(0)), line)))
        prev_blank = blank
    if pending:
        code.append(pending)
    return prose, code, defined


def repository_paths(piece):
    """The repository paths (see the module docstring) in one piece of code, braces expanded,
    placeholders left out."""
    out = []
    for m in REPO_PATH.finditer(piece):
        for candidate in expand_braces(m.group(1).rstrip('.')):
            if not PATH_PLACEHOLDER.search(candidate):
                out.append(candidate)
    return out


def path_problems(page, no, piece, root, defined, skip=()):
    """Messages for the repository paths of ``piece`` that do not exist (those in ``skip``,
    which the command check reports, left out)."""
    skipped = {c for name in skip for c in expand_braces(name)}
    return [f'{page}:{no}: names a path that does not exist: {candidate} (in `{piece.strip()}`)'
            for candidate in dict.fromkeys(repository_paths(piece))
            if candidate not in skipped and candidate not in defined
            and not (root / candidate).exists()]


def link_problems(path, root=ROOT):
    """Messages ``page:line: what`` for everything in the page at ``path`` that does not
    resolve inside the repository at ``root``."""
    path = Path(path).resolve()
    page = path.relative_to(root).as_posix()
    text = path.read_text(encoding='utf-8')
    prose, code, defined = scan(text)
    problems = []
    for no, line in enumerate(text.split('\n'), 1):
        if OUTSIDE in line:
            problems.append(f'{page}:{no}: refers to {OUTSIDE} (outside the repository): '
                            f'{line.strip()}')
    for no, line in prose:
        targets = [m.group(1) for m in LINK.finditer(line)]
        targets += [m.group(1) for m in REF_DEF.finditer(line)]
        targets += [m.group(1) for m in HTML_ATTR.finditer(line)]
        for target in targets:
            target = target.strip('<>')
            if not target or target.startswith(SKIP_SCHEMES + ('#',)):
                continue
            rel = unquote(target.split('#', 1)[0].split('?', 1)[0])
            resolved = (path.parent / rel).resolve()
            if resolved != root and root not in resolved.parents:
                problems.append(f'{page}:{no}: broken link {target!r} (outside the repository)')
            elif not resolved.exists():
                problems.append(f'{page}:{no}: broken link {target!r} '
                                f'({resolved.relative_to(root).as_posix()} does not exist)')
    for no, piece in code:
        for m in GLOB.finditer(piece):
            for pattern in expand_braces(m.group(1)):
                if not any(root.glob(pattern)):
                    problems.append(f'{page}:{no}: pattern matches no file: {pattern}')
        scripts = [m.group(1) for m in RUN.finditer(piece)]
        m = LEADING_SCRIPT.match(piece)
        if m and not piece.lstrip().startswith(('python', 'bash')):
            scripts.append(m.group(1))
        args = [m.group(1) for m in ARG.finditer(piece)] if scripts else []
        problems += path_problems(page, no, piece, root, defined, skip=scripts + args)
        if not scripts:
            continue
        for name in dict.fromkeys(scripts + args):
            for candidate in expand_braces(name):
                if PLACEHOLDER.search(candidate) or candidate in defined:
                    continue
                if not (root / candidate).is_file():
                    what = 'script' if name in scripts else 'file'
                    problems.append(f'{page}:{no}: command names a {what} that does not exist: '
                                    f'{candidate} (in `{piece.strip()}`)')
    return sorted(problems, key=lambda msg: int(msg[len(page) + 1:].split(':', 1)[0]))


@pytest.mark.parametrize('page', PAGES)
def test_links_and_commands_resolve(page):
    if not (ROOT / page).is_file():
        pytest.skip(f'{page} is not in this checkout')
    problems = link_problems(ROOT / page)
    assert not problems, '\n'.join(problems)


def test_docs_pages_are_found():
    assert len([p for p in PAGES if p.startswith('docs/')]) >= 5, PAGES


PROBE = r"""# probe
See [design](OUTSIDE/DESIGN.md) and [docs](analysis.md#speed), [web](https://x.org/a.md).
![missing](no_such_picture.png) ![](pictures/ok.png)
Run `python tools/analysis/train_curve.py CONFIG --minutes 20`.
Run `tools/train.py configs/no_such_config.py --minutes 1`.
Fine: `python tools/train.py configs/quickstart/seg.py`, `densevit/my_new_file.py`,
`python tools/convert/{vit,swin}.py IN OUT`, `python tools/analysis/<tool>.py`.

```python
# configs/my_own.py
_base_ = ['./quickstart/seg.py']
```

```bash
python tools/analysis/browse_dataset.py configs/my_own.py --out-dir b
OMP_NUM_THREADS=1 taskset -c 0 python tools/analysis/train_curve.py \
    configs/studies/previous.py --minutes 5
bash tools/dist_train.sh configs/quickstart/seg.py 8
python -m pytest tests/no_such_test.py
```

    python benchmarks/no_such_bench.py

Tests: `tools/convert/*.py` and `tests/models/test_convert_*.py`; outputs `work_dirs/curves/*`.
Paths: `tools/train.py: main`, `tools/train.py::test`, `docs/pictures/`,
`tests/faults/test_NAME.py`, `configs/<name>.py`, `work_dirs/x/iter_N.pth`, `data/shapes/val`,
`configs/my_data.py`,
`densevit.engine.no_such`, `tools/convert/{vit,swin}.py` and `(see docs/analysis.md)` exist or
are not repository paths; `densevit/engine/no_such.py`, `docs/results/`,
`tools/convert/{vit,nope}.py` and `tools/b{0..1}.py` do not.
""".replace('OUTSIDE', OUTSIDE)


def test_the_checker_catches_what_it_should(tmp_path):
    """Stale scripts and configs, broken links, the outside folder, paths in code that do not
    exist; placeholders, URLs, anchors, brace alternatives, paths outside the repository's
    source folders and a file the page itself defines pass."""
    for name in ('docs/analysis.md', 'docs/pictures/ok.png', 'tools/train.py', 'tools/b0.py',
                 'tools/convert/vit.py', 'tools/convert/swin.py',
                 'tools/analysis/browse_dataset.py', 'tools/dist_train.sh',
                 'configs/quickstart/seg.py'):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text('')
    page = tmp_path / 'docs' / 'probe.md'
    page.write_text(PROBE, encoding='utf-8')
    problems = link_problems(page, root=tmp_path.resolve())
    text = '\n'.join(problems)
    assert f'docs/probe.md:2: refers to {OUTSIDE}' in text
    assert f"docs/probe.md:2: broken link '{OUTSIDE}/DESIGN.md'" in text
    assert "docs/probe.md:3: broken link 'no_such_picture.png'" in text
    assert ('docs/probe.md:4: command names a script that does not exist: '
            'tools/analysis/train_curve.py') in text
    assert ('docs/probe.md:5: command names a file that does not exist: '
            'configs/no_such_config.py') in text
    assert ('docs/probe.md:16: command names a script that does not exist: '
            'tools/analysis/train_curve.py') in text
    assert 'configs/studies/previous.py' in text  # on the continuation line
    assert ('docs/probe.md:22: command names a script that does not exist: '
            'benchmarks/no_such_bench.py') in text
    assert 'docs/probe.md:24: pattern matches no file: tests/models/test_convert_*.py' in text
    assert 'docs/probe.md:19: names a path that does not exist: tests/no_such_test.py' in text
    paths = [m.split(': names a path that does not exist: ')[1].split(' (in ')[0]
             for m in problems if int(m.split(':')[1]) >= 25]  # the "Paths:" lines
    assert paths == ['densevit/engine/no_such.py', 'docs/results/', 'tools/convert/nope.py',
                     'tools/b1.py']
    assert len(problems) == 14, text
