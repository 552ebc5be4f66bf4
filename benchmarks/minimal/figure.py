"""Minimal rule 2: one figure with matplotlib."""
import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

smk = snakemake  # noqa: F821
df = pd.read_csv(smk.input[0])
fig, ax = plt.subplots(figsize=(4, 3))
ax.plot(df["x"], df["y"])
fig.savefig(smk.output[0])
