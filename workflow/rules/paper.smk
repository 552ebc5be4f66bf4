# Numbers -> provenance ledger -> the rendered note and lab (Markdown + self-contained HTML, PDF on
# request) -> the claims check. Domain rule files register their numbers and figures in
# common.smk's NUMBERS / FIGURES / LAB_FIGURES; its input functions read them lazily.


# One process for the ledger, both documents and the claims report: each step reads what the one
# before built (the registry, the ledger, what each document printed), so they share it in memory.
rule publish:
    message:
        "Provenance ledger, the note and the lab rendered from paper/templates, and the claims check of what they print"
    input:
        unpack(document_figures),
        code=PACKAGE_CODE,
        numbers=numbers_files,
        manifest=MANIFEST,
        template_files=template_files,
        claims=config["claims"],
    output:
        ledger="results/provenance.json",
        note_md="paper/note.md",
        note_html="paper/note.html",
        note_prov="paper/note.provenance.html",
        note_used="results/rendered/note.used.json",
        validation_md="paper/validation.md",
        validation_html="paper/validation.html",
        validation_prov="paper/validation.provenance.html",
        validation_used="results/rendered/validation.used.json",
        valpool_md="paper/validation-pool.md",
        valpool_html="paper/validation-pool.html",
        valpool_prov="paper/validation-pool.provenance.html",
        valpool_used="results/rendered/validation-pool.used.json",
        valinputs_md="paper/validation-inputs.md",
        valinputs_html="paper/validation-inputs.html",
        valinputs_prov="paper/validation-inputs.provenance.html",
        valinputs_used="results/rendered/validation-inputs.used.json",
        lab_md="paper/lab.md",
        lab_html="paper/lab.html",
        lab_prov="paper/lab.provenance.html",
        lab_used="results/rendered/lab.used.json",
        claims_md=report("results/claims.md", caption="../report/claims.rst", category="Claims"),
        claims_csv="results/claims.csv",
    params:
        documents=documents,
    # the three documents render side by side (kvtier.render.document.render_documents): publish
    # runs last, when nothing else can
    threads: 5
    log:
        "logs/publish.log",
    benchmark:
        "results/benchmarks/publish.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/paper_publish.py"


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
        "Print paper/{wildcards.doc}.html to PDF with headless Chromium"
    input:
        code=PACKAGE_CODE,
        html="paper/{doc}.html",
    output:
        pdf="paper/{doc}.pdf",
    wildcard_constraints:
        doc="note|validation|validation-pool|validation-inputs|lab",
    params:
        chromium=config.get("chromium", "chromium"),
    log:
        "logs/{doc}_pdf.log",
    benchmark:
        "results/benchmarks/{doc}_pdf.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/paper_pdf.py"


# One target per central claim of the note and the lab (the README's claims table). Each has no
# output, so it runs whenever it is asked for, and prints the published numbers it checked, with
# their recomputed values, on the console (a target with only inputs would say "Nothing to be done").


rule claim_eviction:
    message:
        "The eviction claim (Table 1, Figure 1a): the published numbers it rests on, checked"
    input:
        table="results/tables/table1.csv",
        figure="figures/fig1a.svg",
        numbers="results/numbers/evict.json",
    log:
        "logs/claim_eviction.log",
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/paper_claim_show.py"


rule claim_production:
    message:
        "The production claims (Table 2, Figure 1b, cold reads): the published numbers they rest on, checked"
    input:
        table="results/tables/table2_C.csv",
        figure="figures/fig1b_C.svg",
        numbers="results/numbers/production_C.json",
        coldread="results/numbers/coldread.json",
    log:
        "logs/claim_production.log",
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/paper_claim_show.py"


rule claim_lab:
    message:
        "The lab's claims: the published numbers they rest on, checked"
    input:
        page="paper/lab.html",
        numbers="results/numbers/lab.json",
    log:
        "logs/claim_lab.log",
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/paper_claim_show.py"


rule claim_counterfactual:
    message:
        "The counterfactual (modelled beyond the note): no published number rests on it; says so"
    input:
        figure="figures/fig2.svg",
        numbers="results/numbers/counterfactual.json",
    log:
        "logs/claim_counterfactual.log",
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/paper_claim_show.py"
