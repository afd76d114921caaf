"""Analyses of a model and of a run: theoretical work per layer (`flops`), the device's roofline
(`roofline`) and measurement hygiene (`hygiene`). Below the evaluation loop, which reports them."""
