# Numbers -> provenance ledger -> the rendered note (Markdown + self-contained HTML, PDF on
# request) -> the claims check. Domain rule files register their numbers and figures in
# common.smk's NUMBERS / FIGURES; the input functions below read them lazily.


rule provenance:
    message:
        "Provenance ledger: every number -> rule, script, raw inputs with sha256, commit"
    input:
        code=PACKAGE_CODE,
        numbers=numbers_files,
        manifest=MANIFEST,
    output:
        ledger="results/provenance.json",
    log:
        "logs/provenance.log",
    benchmark:
        "results/benchmarks/provenance.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/paper_provenance.py"


rule render_note:
    message:
        "Render the note from paper/templates into paper/note.md and paper/note.html"
    input:
        unpack(figure_files),
        code=PACKAGE_CODE,
        numbers=numbers_files,
        ledger="results/provenance.json",
        manifest=MANIFEST,
        template_files=template_files,
    output:
        md="paper/note.md",
        html="paper/note.html",
        prov="paper/note.provenance.html",
        used="results/rendered/note.used.json",
    params:
        template="note.md.j2",
        title="A Host-RAM Tier for the KV Cache",
    log:
        "logs/render_note.log",
    benchmark:
        "results/benchmarks/render_note.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/paper_render.py"


rule claims_report:
    message:
        "Check every published number against the recomputed registry"
    input:
        code=PACKAGE_CODE,
        numbers=numbers_files,
        claims=config["claims"],
        note_printed="results/rendered/note.used.json",
        lab_printed="results/rendered/lab.used.json",
    output:
        md=report("results/claims.md", caption="../report/claims.rst", category="Claims"),
        csv="results/claims.csv",
    log:
        "logs/claims_report.log",
    benchmark:
        "results/benchmarks/claims_report.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/paper_claims.py"


rule claims:
    message:
        "Fail if any published number is not reproduced (see results/claims.md)"
    input:
        code=PACKAGE_CODE,
        csv="results/claims.csv",
    output:
        ok="results/claims.passed",
    log:
        "logs/claims.log",
    benchmark:
        "results/benchmarks/claims.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/paper_claims_gate.py"


rule note_pdf:
    message:
        "Print paper/note.html to PDF with headless Chromium"
    input:
        code=PACKAGE_CODE,
        html="paper/note.html",
    output:
        pdf="paper/note.pdf",
    params:
        chromium=config.get("chromium", "chromium"),
    log:
        "logs/note_pdf.log",
    benchmark:
        "results/benchmarks/note_pdf.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/paper_pdf.py"


# One target per central claim of the note and the lab (the README's claims table).


rule claim_eviction:
    input:
        table="results/tables/table1.csv",
        figure="figures/fig1a.svg",
        numbers="results/numbers/evict.json",


rule claim_production:
    input:
        table="results/tables/table2_C.csv",
        figure="figures/fig1b_C.svg",
        numbers="results/numbers/production_C.json",
        coldread="results/numbers/coldread.json",


rule claim_lab:
    input:
        page="paper/lab.html",
        numbers="results/numbers/lab.json",


rule claim_counterfactual:
    input:
        figure="figures/fig2.svg",
        numbers="results/numbers/counterfactual.json",
