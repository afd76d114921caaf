"""One predictor per framework: `pytorch`, `tensorflow`, `onnxruntime`.

Each module imports its framework at the top, so it is imported only when its predictor is asked
for (`predictor.predictor_class`), never by `import predictors`. A module implements only what
differs between frameworks (loading, one inference, device synchronisation, the device
check); the evaluation loop around it is `predictors.evaluation`.
"""

from __future__ import annotations

from predictors.protocol import cuda_index

__all__ = ["cuda_index"]
