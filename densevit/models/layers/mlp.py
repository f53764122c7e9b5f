"""The small perceptron DETR uses as its box predictor (and DN uses for box positions)."""
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    """``num_layers`` Linear layers with ReLU between them (DETR's box predictor: 3 layers).

    Shapes: [..., in_dims] -> [..., out_dims].
    """

    def __init__(self, in_dims, hidden_dims, out_dims, num_layers):
        super().__init__()
        dims = [in_dims] + [hidden_dims] * (num_layers - 1)
        self.layers = nn.ModuleList(nn.Linear(i, o)
                                    for i, o in zip(dims, dims[1:] + [out_dims], strict=True))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x) if i == len(self.layers) - 1 else F.relu(layer(x))
        return x
