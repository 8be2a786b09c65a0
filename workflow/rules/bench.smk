# All-reduce micro-benchmark (nccl-tests style) per rank count: every
# configured algorithm, sizes by doubling, results checked.


rule bench:
    output:
        "results/bench/n{ranks}.json",
    log:
        "results/logs/bench/n{ranks}.log",
    conda:
        "../envs/scalerepro.yaml"
    threads: lambda w: int(w.ranks)
    resources:
        **mpi_resources(CFG.cluster.bench_runtime_min, gpus=False, measure=1),
    params:
        launch=lambda w, resources: CFG.cluster.launch(resources.launcher),
        cfg=sections("bench", "comm"),
        compare=",".join(a for a in ("native", "gloo") if a in CFG.bench.algorithms),
    shell:
        "{params.launch} -n {wildcards.ranks} scalerepro bench --config-json {params.cfg:q}"
        " --compare {params.compare:q} --out {output} > {log} 2>&1"


rule cost_model:
    input:
        bench=BENCH_RUNS,
        platforms="config/platforms.yaml",
        sources="config/sources.yaml",
    output:
        "results/analysis/costmodel.json",
    log:
        "results/logs/cost_model.log",
    conda:
        "../envs/scalerepro.yaml"
    params:
        cfg=sections("simulate.platforms", "simulate.ranks", "comm.colors"),
    shell:
        "scalerepro cost-model --config-json {params.cfg:q} --bench {input.bench} --platforms {input.platforms}"
        " --out {output} > {log} 2>&1"
