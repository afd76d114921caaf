"""Analyses of a model or of results: theoretical work (`flops`), the roofline (`roofline`), measurement hygiene (`hygiene`) and repeat studies (`study`)."""
