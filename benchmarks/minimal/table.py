"""Minimal rule 1: a small table with pandas."""
import numpy as np
import pandas as pd

smk = snakemake  # noqa: F821
x = np.arange(50)
pd.DataFrame({"x": x, "y": np.sqrt(x)}).to_csv(smk.output[0], index=False)
