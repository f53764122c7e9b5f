from pathlib import Path

from setuptools import find_packages, setup

here = Path(__file__).parent
requirements = [
    line.strip() for line in (here / 'requirements.txt').read_text().splitlines()
    if line.strip() and not line.startswith('#')
]

# onnxscript: torch.onnx.export(dynamo=True); tested with onnx 1.23, onnxruntime 1.32,
# onnxscript 0.7 (whose graph optimizer is not used: see densevit/deploy/export.py)
DEPLOY = ['onnx>=1.16', 'onnxruntime>=1.18', 'onnxscript>=0.5']

setup(
    name='densevit',
    version='0.1.0',
    description='Dense prediction (detection, segmentation) on Vision Transformers, '
    'built on mmengine, with no compiled ops.',
    long_description=(here / 'README.md').read_text() if (here / 'README.md').exists() else '',
    long_description_content_type='text/markdown',
    packages=find_packages(include=['densevit', 'densevit.*']),
    python_requires='>=3.10',
    install_requires=requirements,
    # transformers, monai: the reference implementations the weight converters are proven
    # against (monai's UNETR needs einops, an optional dependency of monai)
    # cityscapesscripts: its panoptic evaluation (a port of the COCO panoptic API) is the
    # reference CocoPanopticMetric is checked against
    # ruff: the lint .ci/run runs (pinned: new releases add rules)
    extras_require={'tests': ['pytest>=7', 'transformers>=4.40,<6', 'safetensors>=0.4',
                              'monai>=1.3', 'einops>=0.6', 'cityscapesscripts==2.3.0',
                              'tensorboard>=2.10', 'ruff==0.17.6', *DEPLOY],
                    # tools/train.py --tensorboard (mmengine's TensorboardVisBackend)
                    'tensorboard': ['tensorboard>=2.10'],
                    # tools/deploy/export_onnx.py and densevit/deploy (ONNX Runtime backend)
                    'deploy': DEPLOY},
)
