# Logs -> tidy tables -> metrics and analysis tables -> figures.


rule collect:
    input:
        runs=TRAIN_RUNS,
        bench=BENCH_RUNS,
    output:
        TABLES,
    log:
        "results/logs/collect.log",
    conda:
        "../envs/scalerepro.yaml"
    params:
        out=lambda w, output: Path(output[0]).parent,
    shell:
        "scalerepro collect --runs {input.runs} --bench {input.bench} --out {params.out} > {log} 2>&1"


rule mlperf_logs:
    input:
        TRAIN_RUNS,
    output:
        MLPERF_LOGS,
    log:
        "results/logs/mlperf_logs.log",
    conda:
        "../envs/scalerepro.yaml"
    params:
        out=lambda w, output: Path(output[0]).parent,
    shell:
        "scalerepro mlperf-log --runs {input} --out {params.out} > {log} 2>&1"


rule analyze:
    input:
        tables=TABLES,
        baselines="config/baselines.yaml",
        papers=PAPERS,
        sources="config/sources.yaml",
        costmodel="results/analysis/costmodel.json",
        simulation=SIMULATION,
    output:
        metrics="results/metrics.json",
        tables=[
            (
                report(p, caption="../report/table.rst", category="Tables")
                if p.endswith(("scaling.csv", "comparison.csv", "papers.csv"))
                else p
            )
            for p in ANALYSIS
        ],
    log:
        "results/logs/analyze.log",
    conda:
        "../envs/scalerepro.yaml"
    params:
        tables=lambda w, input: Path(input.tables[0]).parent,
        out=lambda w, output: Path(output.tables[0]).parent,
        simulation=f"--simulation {Path(SIM_SCALE[0]).parent}" if SIMULATION else "",
        cfg=sections("train"),
    shell:
        "scalerepro analyze --tables {params.tables} --baselines {input.baselines}"
        " --costmodel {input.costmodel} {params.simulation} --config-json {params.cfg:q}"
        " --metrics {output.metrics} --out {params.out} > {log} 2>&1"


rule plot:
    input:
        ANALYSIS,
    output:
        png=[report(p, caption=f"../report/{Path(p).stem}.rst", category="Figures") for p in PLOTS],
        svg=PLOTS_SVG,
    log:
        "results/logs/plot.log",
    conda:
        "../envs/scalerepro.yaml"
    params:
        analysis=lambda w, input: Path(input[0]).parent,
        out=lambda w, output: Path(output.png[0]).parent,
    shell:
        "scalerepro plot --analysis {params.analysis} --out {params.out} > {log} 2>&1"


rule reproduce:
    input:
        tables=ANALYSIS,
        papers=PAPERS,
        sources="config/sources.yaml",
    output:
        cards="results/reproduction.md",
        table="results/analysis/reproduction.csv",
        page=report(
            "results/reproduction.html",
            caption="../report/reproduction.rst",
            category="Reproduction",
        ),
        metrics="results/reproduction.json",
    log:
        "results/logs/reproduce.log",
    conda:
        "../envs/scalerepro.yaml"
    params:
        analysis=lambda w, input: Path(input.tables[0]).parent,
        papers=lambda w, input: Path(input.papers[0]).parent,
    shell:
        "scalerepro reproduce --analysis {params.analysis} --papers {params.papers} --out {output.cards}"
        " --csv {output.table} --html {output.page} --json {output.metrics} > {log} 2>&1"
