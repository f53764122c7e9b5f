"""ONNX Runtime on an exported graph equals PyTorch within 1e-4: the graph's outputs at three
image sizes (dynamic batch / height / width), and the predictions of a padded batch of mixed
sizes through the shared post-processing (``OnnxRuntimeModel`` against ``model.predict``).

The rows (``onnx_cases.py``) are a covering design of the backbone x head matrix of
tests/integration, not its product: every backbone exported once, with one head, and every
head (and Deformable DETR's box refinement and two-stage) on some backbone; the matrix's own
list checks the cover (``test_rows_cover_the_backbone_head_matrix``)."""
import pytest
import torch
from onnx_cases import DET, MASK, ROWS, SEG

from densevit.deploy.graphs import graph_for
from densevit.deploy.onnx_model import OnnxRuntimeModel
from densevit.deploy.runtime import OnnxGraph
from densevit.structures import DataSample

from tiny_run import load_tool

TOL = 1e-4
SIZES = [(1, 96, 96), (2, 80, 112), (3, 112, 72)]  # (batch, H, W), none the export example's


def _inputs(B, H, W, seed=1):
    return torch.randn(B, 3, H, W, generator=torch.Generator().manual_seed(seed))


def _task(name):
    return 'seg' if name in SEG else 'det' if name in DET else 'mask'


@pytest.mark.parametrize('name', SEG + DET + MASK)
def test_graph_outputs_equal_at_three_sizes(exported, name):
    model, path = exported(name)
    task = _task(name)
    ort_graph, torch_graph = OnnxGraph(path, task), graph_for(model)
    for B, H, W in SIZES:
        x = _inputs(B, H, W)
        args = (x, torch.zeros(B, H, W, dtype=torch.bool)) if task == 'det' else (x,)
        with torch.no_grad():
            ref = torch_graph(*args)
        got = ort_graph(*args)
        ref, got = ((ref,), (got,)) if task == 'seg' else (ref, got)
        for r, g in zip(ref, got, strict=True):
            assert g.shape == r.shape, (name, (B, H, W))
            diff = (g - r).abs().max().item()
            assert diff <= TOL, f'{name} at {(B, H, W)}: max |ORT - PyTorch| = {diff:.2e}'


def _padded_batch():
    """Two images of different sizes padded bottom / right into one [2, 3, 96, 96] batch,
    the first resized from a larger original (its predictions are scaled back)."""
    shapes = [(72, 96), (96, 56)]
    x = torch.zeros(2, 3, 96, 96)
    samples = []
    for i, (h, w) in enumerate(shapes):
        x[i, :, :h, :w] = _inputs(1, h, w, seed=10 + i)[0]
        scale = 2.0 if i == 0 else 1.0
        samples.append(DataSample(metainfo=dict(
            img_shape=(h, w), ori_shape=(int(h * scale), int(w * scale)),
            scale_factor=(1 / scale, 1 / scale), pad_shape=(96, 96),
            batch_input_shape=(96, 96))))
    return x, samples


def _fresh(samples):
    return [DataSample(metainfo=dict(ds.metainfo)) for ds in samples]


@pytest.mark.parametrize('name', SEG + DET + MASK)
def test_padded_batch_predictions_equal(exported, name):
    model, path = exported(name)
    onnx_model = OnnxRuntimeModel(model, path)
    x, samples = _padded_batch()
    with torch.no_grad():
        ref = model(x, _fresh(samples), mode='predict')
    got = onnx_model(x, _fresh(samples), mode='predict')
    for r, g in zip(ref, got, strict=True):
        if name in MASK:  # semantic, panoptic and instance outputs of the same post-processing
            assert torch.equal(g.pred_panoptic_seg.sem_seg, r.pred_panoptic_seg.sem_seg)
            rp, gp = r.pred_instances, g.pred_instances
            assert torch.equal(gp.labels, rp.labels) and torch.equal(gp.masks, rp.masks)
            assert (gp.scores - rp.scores).abs().max() <= TOL
        if name in SEG + MASK:
            assert g.seg_logits.data.shape == r.seg_logits.data.shape
            assert r.seg_logits.data.shape[1:] == r.ori_shape
            assert (g.seg_logits.data - r.seg_logits.data).abs().max() <= TOL
            assert torch.equal(g.pred_sem_seg.data, r.pred_sem_seg.data)
        else:
            rp, gp = r.pred_instances, g.pred_instances
            assert torch.equal(gp.labels, rp.labels)
            assert (gp.scores - rp.scores).abs().max() <= TOL
            # pixels of the original image: the 1e-4 holds on the normalised boxes
            assert (gp.bboxes - rp.bboxes).abs().max() <= TOL * max(r.ori_shape)


def test_padding_mask_is_an_input_of_the_detector_graph(exported):
    """The mask changes the answer (so a padded batch cannot be right by accident) and ORT
    follows it: padding the second image differently changes ORT's outputs as PyTorch's."""
    model, path = exported('detr_vit')
    ort_graph, torch_graph = OnnxGraph(path, 'det'), graph_for(model)
    x = _inputs(2, 96, 96)
    mask = torch.zeros(2, 96, 96, dtype=torch.bool)
    mask[1, 56:] = True
    with torch.no_grad():
        ref, ref_nopad = torch_graph(x, mask), torch_graph(x, torch.zeros_like(mask))
    got = ort_graph(x, mask)
    assert (ref[0][1] - ref_nopad[0][1]).abs().max() > 1e-3
    assert (got[0] - ref[0]).abs().max() <= TOL and (got[1] - ref[1]).abs().max() <= TOL


def test_rows_cover_the_backbone_head_matrix():
    """Every backbone and every head of the matrix (tests/integration) is exported in some
    row, as are Deformable DETR's options: the covering design of ``onnx_cases.py``."""
    matrix = load_tool('tests/integration/test_backbone_head_matrix.py')
    backbones = {b for b, _ in ROWS.values()}
    heads = {h for _, h in ROWS.values()}
    assert {b for b, _ in matrix.COMBOS} <= backbones, 'a matrix backbone has no ONNX row'
    assert {h for _, h in matrix.COMBOS} <= heads, 'a matrix head has no ONNX row'
    assert {'deformable_detr', 'deformable_detr (refine)',
            'deformable_detr (refine, two-stage)', 'dino'} <= heads
    assert set(ROWS) == set(SEG + DET + MASK)


def test_swin_mask_traced_at_one_window_holds_at_more(tmp_path):
    """Swin's shifted-window mask traced where the map is a single window (Swin-T's last
    stage at the 96 x 128 example) is right where it has several: the exporter had built
    ``zeros(shape).masked_fill_`` with a wrong shape there, and ONNX Runtime failed."""
    import onnxruntime as ort
    from torch.export import Dim

    from densevit.models.layers.window_attention import round_up, shifted_window_mask

    class Mask(torch.nn.Module):
        def forward(self, x):
            H, W = x.shape[-2:]
            return shifted_window_mask((round_up(H, 4), round_up(W, 4)), 4, 2)

    example = torch.zeros(2, 1, 3, 4)  # a 3 x 4 map: one 4 x 4 window
    program = torch.export.export(Mask(), (example,), strict=False,
                                  dynamic_shapes=({2: Dim.DYNAMIC, 3: Dim.DYNAMIC},))
    torch.onnx.export(program, (example,), tmp_path / 'mask.onnx', dynamo=True,
                      optimize=False, verbose=False)
    session = ort.InferenceSession(str(tmp_path / 'mask.onnx'),
                                   providers=['CPUExecutionProvider'])
    for hw in [(3, 4), (5, 5), (8, 12), (10, 7)]:
        got = session.run(None, {session.get_inputs()[0].name: torch.zeros(2, 1, *hw).numpy()})
        assert torch.equal(torch.from_numpy(got[0]), Mask()(torch.zeros(2, 1, *hw))), hw
