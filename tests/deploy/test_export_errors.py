"""Bad input to export and to the ONNX Runtime loader: one clear line naming the module / file."""
import pytest
import torch
from onnx_cases import build, old_opset
from torch import nn

from densevit.deploy.export import ExportError, export_onnx
from densevit.deploy.onnx_model import OnnxRuntimeModel
from densevit.deploy.runtime import OnnxGraphError, check_onnx_file


class KthValueHead(nn.Module):
    """A decode head whose op (aten.kthvalue) has no ONNX function."""

    def forward(self, inputs):
        x = inputs[-1]
        return x - torch.kthvalue(x, 2, dim=1, keepdim=True).values


class DataDependentHead(nn.Module):
    """A decode head with a Python branch on tensor values (not traceable)."""

    def forward(self, inputs):
        x = inputs[-1]
        return x if x.sum() > 0 else -x


#: the cheapest row to trace (the backbone is traced before the head fails)
CHEAP = 'setr_pup_vit_pe_none'


def test_op_without_onnx_equivalent_names_the_module(tmp_path):
    model = build(CHEAP)
    model.decode_head = KthValueHead()
    model.decode_head.predict = lambda feats, metas, cfg: model.decode_head(feats)
    with pytest.raises(ExportError) as err:
        export_onnx(model, tmp_path / 'bad.onnx')
    msg = str(err.value)
    assert 'KthValueHead (model.decode_head)' in msg and 'aten.kthvalue' in msg, msg
    assert len(msg.splitlines()) == 1, msg


def test_untraceable_branch_names_the_module(tmp_path):
    model = build(CHEAP)
    model.decode_head = DataDependentHead()
    model.decode_head.predict = lambda feats, metas, cfg: model.decode_head(feats)
    with pytest.raises(ExportError, match=r'DataDependentHead \(model\.decode_head\)'):
        export_onnx(model, tmp_path / 'bad.onnx')


def test_opset_too_old(tmp_path):
    with pytest.raises(ValueError, match='opset 13 is too old'):
        export_onnx(build(CHEAP), tmp_path / 'x.onnx', opset=13)


def test_file_of_the_other_task_is_refused(exported):
    _, seg_file = exported('segformer_mit')
    with pytest.raises(OnnxGraphError, match=r"inputs \['inputs'\] .* detector graph has "
                                             r"inputs \['inputs', 'pixel_mask'\]"):
        OnnxRuntimeModel(build('detr_vit'), seg_file)


def test_old_opset_and_foreign_files_are_refused(exported, tmp_path):
    import onnx
    from onnx import helper

    _, seg_file = exported('segformer_mit')
    old = old_opset(seg_file, tmp_path / 'old.onnx', 11)  # the real graph, an old opset
    with pytest.raises(OnnxGraphError, match='uses ONNX opset 11; densevit graphs need'):
        check_onnx_file(old, 'seg')
    node = helper.make_node('Relu', ['x'], ['y'])
    graph = helper.make_graph([node], 'g', [helper.make_tensor_value_info('x', 1, [1])],
                              [helper.make_tensor_value_info('y', 1, [1])])
    foreign = tmp_path / 'foreign.onnx'
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid('', 18)]),
              str(foreign))
    with pytest.raises(OnnxGraphError, match=r"has inputs \['x'\]"):
        check_onnx_file(foreign, 'seg')
    (tmp_path / 'junk.onnx').write_text('not onnx')
    with pytest.raises(OnnxGraphError, match='junk.onnx is not a readable ONNX file'):
        check_onnx_file(tmp_path / 'junk.onnx', 'seg')
    with pytest.raises(OnnxGraphError, match='no such ONNX file'):
        check_onnx_file(tmp_path / 'missing.onnx', 'seg')


def test_eomt_with_masked_attention_at_inference_is_refused(tmp_path):
    """EoMT's test_cfg.masked_attention draws random numbers: no graph is exported for it,
    and slide mode (semantic windows) is refused by the ONNX Runtime model."""
    from densevit.deploy.graphs import graph_for

    model = build('eomt_vit')
    model.test_cfg['masked_attention'] = True
    with pytest.raises(ValueError, match=r'^densevit.deploy: test_cfg.masked_attention=True '):
        graph_for(model)
    model.test_cfg.update(masked_attention=False, mode='slide')
    with pytest.raises(ValueError, match=r"runs whole images; the config's test_cfg.mode is "
                                         r"'slide'$"):
        OnnxRuntimeModel(model, tmp_path / 'unused.onnx')
