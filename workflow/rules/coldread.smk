# The cold-read model: four timed cold reads on setup C -> numbers the note prints and the
# model every production restore is expressed with (kvtier.coldread).

NUMBERS.append("results/numbers/coldread.json")
COLDREAD_RAW = {"table": config["coldread"]["table"], "host": config["coldread"]["host"]}


rule coldread_numbers:
    message:
        "Cold-read model: the four timed reads and their date"
    input:
        **COLDREAD_RAW,
        code=PACKAGE_CODE,
        pins=PINS.stamp("coldread_numbers", COLDREAD_RAW),
    output:
        numbers="results/numbers/coldread.json",
    params:
        above_last=config["coldread"]["above_last"],
    log:
        "logs/coldread_numbers.log",
    benchmark:
        "results/benchmarks/coldread_numbers.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/coldread_numbers.py"
