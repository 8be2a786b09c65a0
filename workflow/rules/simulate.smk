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
        platforms=",".join(CFG.simulate.platforms),
        algos=",".join(CFG.simulate.algorithms),
        ranks=",".join(map(str, CFG.simulate.ranks)),
        dtypes=",".join(CFG.simulate.dtypes),
        bucket_mib=CFG.train.bucket_mib,
        claims_max_ranks=CFG.simulate.claims_max_ranks,
        batch=CFG.simulate.batch_per_rank,
        colors=CFG.comm.colors,
        corners="--corners" if CFG.simulate.corners else "--no-corners",
        sensitivity="--sensitivity" if CFG.simulate.sensitivity else "",
    shell:
        "scalerepro simulate-scale --platforms {input.platforms} --platform {params.platforms} --algos {params.algos}"
        " --ranks {params.ranks} --dtypes {params.dtypes} --bucket-mib {params.bucket_mib}"
        " --claims-max-ranks {params.claims_max_ranks} --batch {params.batch} {params.corners} {params.sensitivity}"
        " --colors {params.colors} --jobs {threads}"
        " --out {params.out} > {log} 2>&1"
