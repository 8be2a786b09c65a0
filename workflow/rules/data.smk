# Input data: the synthetic laptop dataset (generated) or an existing ImageNet
# folder, packed into shards. Staging into node memory happens inside the
# training job (train.smk), where the node is known.


if CFG.dataset.generate:

    rule make_dataset:
        output:
            directory(DATASET),
        log:
            "results/logs/make_dataset.log",
        conda:
            "../envs/scalerepro.yaml"
        params:
            cfg=sections("dataset"),
        shell:
            "scalerepro make-dataset --config-json {params.cfg:q} > {log} 2>&1"


# One job per split with cluster.shard_cpus threads. The manifest, written last, is the
# declared output: the shards beside it survive a failed or timed-out attempt, and the
# retry keeps every shard it finished (pack.py). The log ends with the rate per CPU and
# its projection for ILSVRC-2012, to set cluster.shard_runtime_min by.
rule shard:
    input:
        DATASET if CFG.dataset.generate else [],
    output:
        "results/shards/{split}/manifest.json",
    log:
        "results/logs/shard_{split}.log",
    conda:
        "../envs/scalerepro.yaml"
    threads: CFG.cluster.shard_cpus
    resources:
        cpus_per_task=CFG.cluster.shard_cpus,
        mem_mb_per_cpu=CFG.cluster.mem_mb_per_cpu,
        runtime=CFG.cluster.shard_runtime_min,
    params:
        cfg=sections("dataset", "shard"),
        dataset=lambda w: DATASET,
        root=lambda w, output: Path(output[0]).parent.parent,
    shell:
        "scalerepro shard --config-json {params.cfg:q} --dataset {params.dataset:q}"
        " --split {wildcards.split} --out {params.root} --threads {threads} > {log} 2>&1"
