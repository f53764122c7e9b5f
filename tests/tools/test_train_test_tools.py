"""tools/train.py and tools/test.py end to end, in-process, on a tiny DETR and shapes data."""
import json
import pickle

import cv2
import pytest
import torch

from densevit.visualization.enlarge import enlarge_factor

from tiny_run import isolated, load_tool, scalar_records, train_losses, unique_names, write_config

MAX_ITERS = 4
NUM_VAL = 5


@pytest.fixture(scope='module')
def train_tool():
    return load_tool('tools/train.py')


@pytest.fixture(scope='module')
def test_tool():
    return load_tool('tools/test.py')


@pytest.fixture(scope='module')
def trained(tmp_path_factory, train_tool):
    """One 4-iteration training run (checkpoint every 2, validation at 4), shared by the module."""
    root = tmp_path_factory.mktemp('trained')
    config = write_config(root)
    work_dir = root / 'work'
    with isolated():
        rc = train_tool.main([config, '--work-dir', str(work_dir), '--cfg-options',
                              *unique_names()])
    assert rc == 0
    return dict(root=root, config=config, work_dir=work_dir)


def test_train_saves_checkpoints(trained):
    work_dir = trained['work_dir']
    assert (work_dir / 'iter_2.pth').is_file() and (work_dir / 'iter_4.pth').is_file()
    last = work_dir / (work_dir / 'last_checkpoint').read_text().strip()  # relative
    assert last.name == f'iter_{MAX_ITERS}.pth'
    ckpt = torch.load(last, map_location='cpu', weights_only=True)
    assert ckpt['meta']['iter'] == MAX_ITERS
    assert {'state_dict', 'optimizer', 'param_schedulers', 'message_hub'} <= set(ckpt)


def test_train_logs_losses_and_val_metrics(trained):
    work_dir = trained['work_dir']
    assert sorted(train_losses(work_dir)) == list(range(1, MAX_ITERS + 1))  # logger interval 1
    val = [r for r in scalar_records(work_dir) if 'coco/bbox_mAP' in r]
    assert len(val) == 1 and val[0]['step'] == MAX_ITERS
    assert {'coco/bbox_mAP_50', 'coco/bbox_mAP_75'} <= set(val[0])
    # the 48-pixel validation images hold only small objects (sides 10-24: areas below 32²),
    # so pycocotools' medium and large ranges have no ground truth and read -1
    assert val[0]['coco/bbox_mAP_m'] == val[0]['coco/bbox_mAP_l'] == -1.0
    assert val[0]['coco/bbox_mAP_s'] >= 0  # the small range has ground truth: scored, not -1
    # LoggerHook also writes the same records to vis_data/<timestamp>.json
    (log_dir,) = [p for p in work_dir.iterdir() if p.is_dir()]
    json_log = log_dir / 'vis_data' / f'{log_dir.name}.json'
    records = [json.loads(line) for line in json_log.read_text().splitlines()]
    assert any('coco/bbox_mAP' in r for r in records)


# mmengine's visualizer warns for boxes touching the right / bottom edge (x2 == width)
@pytest.mark.filterwarnings('ignore:Warning. The (bbox|polygon) is out of bounds')
def test_test_tool_dumps_predictions_and_draws(trained, test_tool, tmp_path):
    work_dir, out = tmp_path / 'test_work', tmp_path / 'preds.pkl'
    ckpt = trained['work_dir'] / f'iter_{MAX_ITERS}.pth'
    rc = test_tool.main([trained['config'], str(ckpt), '--work-dir', str(work_dir),
                         '--out', str(out), '--show-dir', 'show', '--score-thr', '0',
                         '--cfg-options', *unique_names()])
    assert rc == 0

    # DumpResults pickles one dict per image: DataSample.to_dict() moved to the CPU
    with open(out, 'rb') as f:
        preds = pickle.load(f)
    assert isinstance(preds, list) and len(preds) == NUM_VAL
    assert sorted(p['img_id'] for p in preds) == list(range(1, NUM_VAL + 1))
    for p in preds:
        inst = p['pred_instances']
        n = len(inst['scores'])
        assert inst['bboxes'].shape == (n, 4) and inst['labels'].shape == (n,)
        assert ((inst['labels'] >= 0) & (inst['labels'] < 3)).all()

    # --show-dir: relative, so under <work_dir>/<timestamp>/; one PNG per val image
    (log_dir,) = [p for p in work_dir.iterdir() if p.is_dir()]
    pngs = sorted(p.name for p in (log_dir / 'show').iterdir())
    assert pngs == [f'{i:06d}.png' for i in range(NUM_VAL)]
    assert all((log_dir / 'show' / name).stat().st_size > 0 for name in pngs)

    # the test metrics are logged too
    # drawn as ground truth | prediction, side by side, enlarged (each pixel a block of
    # s x s: the shorter side at least 512 pixels)
    img = cv2.imread(str(log_dir / 'show' / pngs[0]))
    s = enlarge_factor((48, 48))
    assert img.shape == (48 * s, 96 * s, 3) and 48 * s >= 512

    # test metrics go to <work_dir>/<timestamp>/<timestamp>.json
    metrics = json.loads((log_dir / f'{log_dir.name}.json').read_text())
    assert {'coco/bbox_mAP', 'coco/bbox_mAP_50'} <= set(metrics)


def stderr_lines(capsys):
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_test_tool_reports_missing_checkpoint(trained, test_tool, tmp_path, capsys):
    missing = tmp_path / 'nope.pth'
    rc = test_tool.main([trained['config'], str(missing), '--work-dir', str(tmp_path / 'w')])
    assert rc == 1
    lines = stderr_lines(capsys)
    assert len(lines) == 1 and str(missing) in lines[0] and 'not found' in lines[0]
    assert not (tmp_path / 'w').exists()  # nothing was built


def test_test_tool_rejects_bad_out_before_building(trained, test_tool, tmp_path, capsys):
    ckpt = trained['work_dir'] / f'iter_{MAX_ITERS}.pth'
    rc = test_tool.main([trained['config'], str(ckpt), '--work-dir', str(tmp_path / 'w'),
                         '--out', str(tmp_path / 'preds.json')])
    assert rc == 1
    lines = stderr_lines(capsys)
    assert len(lines) == 1 and '--out' in lines[0]
    assert not (tmp_path / 'w').exists()


def no_generation(config_root):
    """A config whose shapes data is not generated on demand, in an empty data root."""
    config = write_config(config_root, data_root=config_root / 'empty', name='nogen.py')
    return config, ['train_dataloader.dataset.generate=None', 'val_dataloader.dataset.generate=None',
                    'test_dataloader.dataset.generate=None']


def test_train_tool_reports_missing_annotation_files(train_tool, tmp_path, capsys):
    config, options = no_generation(tmp_path)
    rc = train_tool.main([config, '--work-dir', str(tmp_path / 'w'), '--cfg-options', *options])
    assert rc == 1
    lines = stderr_lines(capsys)
    # val and test name the same file: reported once
    assert len(lines) == 2
    empty = str(tmp_path / 'empty')
    assert 'annotation file not found' in lines[0]
    assert f'{empty}/annotations/instances_train.json' in lines[0]
    assert f'{empty}/annotations/instances_val.json' in lines[1]
    assert not (tmp_path / 'w').exists()


def test_train_tool_reports_missing_resume_checkpoint(trained, train_tool, tmp_path, capsys):
    missing = tmp_path / 'gone.pth'
    rc = train_tool.main([trained['config'], '--work-dir', str(tmp_path / 'w'),
                          '--resume', str(missing)])
    assert rc == 1
    lines = stderr_lines(capsys)
    assert len(lines) == 1 and str(missing) in lines[0]


def test_test_tool_reports_each_missing_file(train_tool, test_tool, tmp_path, capsys):
    """Missing checkpoint and test annotations: one line each. The train split is not
    needed to test, so its absence is not reported."""
    config, options = no_generation(tmp_path)
    missing = tmp_path / 'nope.pth'
    rc = test_tool.main([config, str(missing), '--work-dir', str(tmp_path / 'w'),
                         '--cfg-options', *options])
    assert rc == 1
    lines = stderr_lines(capsys)
    assert len(lines) == 2
    assert sum('instances_val.json' in line for line in lines) == 1
    assert sum(str(missing) in line for line in lines) == 1
    assert not any('instances_train.json' in line for line in lines)


def test_start_up_log_is_short_and_quiet(tmp_path, train_tool, capfd):
    """Before the first iteration: a handful of lines, the resolved config's path, no
    config dump, hook table, parameter-wise options, GPU / NCCL lines or third-party chatter;
    the hook table still reaches the log file."""
    config = write_config(tmp_path)
    work_dir = tmp_path / 'w'
    with isolated():
        rc = train_tool.main([config, '--work-dir', str(work_dir), '--cfg-options',
                              'train_cfg.max_iters=1', 'train_cfg.val_interval=1',
                              *unique_names()])
    assert rc == 0
    out = capfd.readouterr()
    lines = (out.out + out.err).splitlines()
    first = next(i for i, line in enumerate(lines) if 'Iter(train)' in line or
                 line.startswith('train: '))
    assert first <= 15, lines[:first]
    assert any(f'resolved config: {work_dir}/tiny.py' in line for line in lines[:first])
    assert (work_dir / 'tiny.py').is_file()
    text = '\n'.join(lines)
    for noise in ('GPU number', 'nccl', 'paramwise_options', 'Hooks will be executed',
                  'FileClient', 'creating index', 'point_safely', 'model = dict('):
        assert noise not in text, noise
    (log_file,) = work_dir.glob('*/*.log')
    assert 'Hooks will be executed' in log_file.read_text()


def test_test_tool_needs_no_pretrained_file(trained, train_tool, test_tool, tmp_path, capsys):
    """The tested checkpoint replaces every weight: a missing ImageNet file named by the
    backbone's init_cfg stops training (one line) but not testing."""
    options = ['model.backbone.init_cfg.type=Pretrained',
               f'model.backbone.init_cfg.checkpoint={tmp_path}/imagenet.pth']
    rc = train_tool.main([trained['config'], '--work-dir', str(tmp_path / 'w'),
                          '--cfg-options', *options])
    assert rc == 1
    lines = stderr_lines(capsys)
    assert len(lines) == 1 and 'pretrained checkpoint not found' in lines[0]
    with isolated():
        rc = test_tool.main([trained['config'], str(trained['work_dir'] / 'iter_4.pth'),
                             '--work-dir', str(tmp_path / 't'), '--cfg-options', *options,
                             *unique_names()])
    assert rc == 0


def test_auto_scale_lr(train_tool, tmp_path, capsys):
    config = write_config(tmp_path)
    cfg = train_tool.build_config(train_tool.parse_args([config, '--auto-scale-lr', '--cfg-options',
                                                        'auto_scale_lr.base_batch_size=16',
                                                        *unique_names()]))
    assert cfg.auto_scale_lr.enable and cfg.auto_scale_lr.base_batch_size == 16
    # what the runner then does before training: lr x (1 process x batch 2) / 16
    with isolated():
        from densevit.engine.runner import Runner
        runner = Runner.from_cfg(cfg)
        wrapper = runner.build_optim_wrapper(runner.optim_wrapper)
        runner.scale_lr(wrapper, runner.auto_scale_lr)
    base_lr = cfg.optim_wrapper.optimizer.lr
    assert cfg.train_dataloader.batch_size == 2
    assert {g['lr'] for g in wrapper.param_groups} == {base_lr * 2 / 16}
    rc = train_tool.main([config, '--auto-scale-lr', '--work-dir', str(tmp_path / 'w')])
    assert rc == 1
    assert 'auto_scale_lr = dict(base_batch_size=N)' in stderr_lines(capsys)[0]
