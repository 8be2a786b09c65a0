# Input data: the synthetic laptop dataset (generated) or an existing ImageNet
# folder, packed into shards. Staging into node memory happens inside the
# training job (train.smk), where the node is known.


if CFG.dataset.generate:

    rule make_dataset:
        output:
            directory(DATASET),
        params:
            cfg=sections("dataset"),
        log:
            "results/logs/make_dataset.log",
        conda:
            "../envs/scalerepro.yaml"
        shell:
            "scalerepro make-dataset --config-json {params.cfg:q} > {log} 2>&1"


rule shard:
    input:
        DATASET if CFG.dataset.generate else [],
    output:
        directory("results/shards/{split}"),
    params:
        cfg=sections("dataset", "shard"),
        dataset=lambda w: DATASET,
        root=lambda w, output: Path(output[0]).parent,
    log:
        "results/logs/shard_{split}.log",
    conda:
        "../envs/scalerepro.yaml"
    shell:
        "scalerepro shard --config-json {params.cfg:q} --dataset {params.dataset:q}"
        " --split {wildcards.split} --out {params.root} > {log} 2>&1"
