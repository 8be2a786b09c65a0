# All-reduce micro-benchmark (nccl-tests style) per rank count: every
# configured algorithm, sizes by doubling, results checked.


rule bench:
    output:
        "results/bench/n{ranks}.json",
    params:
        cfg=sections("bench", "comm"),
    log:
        "results/logs/bench/n{ranks}.log",
    conda:
        "../envs/scalerepro.yaml"
    threads: lambda w: int(w.ranks)
    resources:
        mpi="mpiexec",
        tasks=lambda w: int(w.ranks),
        measure=1,
    shell:
        "{resources.mpi} -n {resources.tasks} scalerepro bench --config-json {params.cfg:q}"
        " --out {output} > {log} 2>&1"
