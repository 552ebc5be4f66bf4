"""scripts/device-check.sh: setup C's eviction test at reduced scale on one GPU, and the host->GPU
copy bandwidth at the note's block geometry. `plan` needs only the standard library (it runs
before anything is installed), `bandwidth` only torch, `summary` yaml."""
