# The papers' scale in SimGrid: this machine's bench fitted as a platform and
# simulated beside the measurements, then ResNet-50's gradient buckets on the
# platforms of config/platforms.yaml, projected and set against the papers.


rule simulate_validate:
    input:
        BENCH_RUNS,
    output:
        SIM_VALIDATION,
    log:
        "results/logs/simulate_validate.log",
    conda:
        "../envs/scalerepro.yaml"
    threads: 2
    params:
        out=lambda w, output: Path(output[0]).parent,
    shell:
        "scalerepro simulate-validate --bench {input} --jobs {threads} --out {params.out} > {log} 2>&1"


rule simulate_scale:
    input:
        platforms="config/platforms.yaml",
        papers=PAPERS,
        sources="config/sources.yaml",
    output:
        SIM_SCALE,
    log:
        "results/logs/simulate_scale.log",
    conda:
        "../envs/scalerepro.yaml"
    threads: 2
    params:
        out=lambda w, output: Path(output[0]).parent,
        cfg=sections("simulate", *(f"comm.{k}" for k in SHAPE_KEYS), "train.bucket_mib"),
        papers=lambda w, input: Path(input.papers[0]).parent,
    shell:
        "scalerepro simulate-scale --config-json {params.cfg:q} --platforms {input.platforms}"
        " --papers {params.papers} --jobs {threads}"
        " --out {params.out} > {log} 2>&1"
