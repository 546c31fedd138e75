"""The Semantic Engine: training Steps recovered from each GPU's communication sequence alone."""
