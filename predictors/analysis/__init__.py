"""Analyses of a model and of a run: theoretical work per layer (`flops`), the device's roofline
(`roofline`), measurement hygiene (`hygiene`) and where two runs of one model part, layer by
layer (`divergence`). Below the evaluation loop, which reports them."""
