# One training run per grid point (variant, algorithm, rank count, BN group,
# seed, repetition). Inside the job: stage the shards into each node's memory (one process
# per node), then launch the ranks with the same launcher (mpiexec on a laptop, srun
# --mpi=pmi2 on SLURM; see the profiles). A failed or interrupted attempt
# leaves checkpoint.pt and events.jsonl.partial in the run folder (neither is
# a declared output, so Snakemake keeps them); the retry or rerun resumes there.


rule train:
    input:
        train="results/shards/train/manifest.json",
        val="results/shards/val/manifest.json",
    output:
        run="results/train/{variant}/{algo}/n{ranks}/g{bn}-s{seed}-r{rep}/run.json",
        events="results/train/{variant}/{algo}/n{ranks}/g{bn}-s{seed}-r{rep}/events.jsonl",
        stage="results/train/{variant}/{algo}/n{ranks}/g{bn}-s{seed}-r{rep}/stage.json",
    log:
        "results/logs/train/{variant}/{algo}-n{ranks}-g{bn}-s{seed}-r{rep}.log",
    conda:
        "../envs/scalerepro.yaml"
    threads: lambda w: int(w.ranks)
    resources:
        **mpi_resources(CFG.cluster.train_runtime_min, measure=1),
    params:
        launch=lambda w, resources: CFG.cluster.launch(resources.launcher),
        stage_launch=lambda w, resources: CFG.cluster.launch_per_node(resources.launcher, int(w.ranks)),
        cfg=lambda w: json.dumps(CFG.run_sections(w.variant), sort_keys=True),
        start=CFG.comm.timeout_s,
        out=lambda w, output: Path(output.run).parent,
        shards=lambda w, input: Path(input.train).parent.parent,
        train=lambda w, input: Path(input.train).parent,
        val=lambda w, input: Path(input.val).parent,
    shell:
        # Every attempt's output is appended to the run folder's attempts.log (Snakemake removes
        # {log} before a retry); `supervise` names the rank that died, the step and the checkpoint,
        # stops a launch whose ranks have not started (MPI_Init stuck) after comm.timeout_s, and
        # stops the training (the ranks checkpoint) if the Snakemake that runs this shell ($PPID) ends.
        '(echo "== train job on $(hostname) at $(date -u +%FT%TZ)"'
        " && {params.stage_launch} scalerepro stage --config-json {params.cfg:q}"
        " --shards {params.train} {params.val} --log {output.stage}"
        " && scalerepro supervise --run-dir {params.out} --start-timeout {params.start} --watch $PPID --"
        " {params.launch} -n {wildcards.ranks} scalerepro train --config-json {params.cfg:q}"
        " --set train.bn_group={wildcards.bn} --set train.seed={wildcards.seed} --rep {wildcards.rep}"
        " --variant {wildcards.variant}"
        " --algo {wildcards.algo} --shards {params.shards} --out {params.out}) 2>&1"
        " | tee -a {params.out}/attempts.log > {log}"


# End of the sweep: remove the staged shards from every node that staged them (one srun
# task per node under SLURM), unless stage.keep (default: kept off SLURM, removed under it).
# Runs where the workflow runs: srun allocates each node briefly, skipping busy ones.
localrules:
    clean_stage,


rule clean_stage:
    input:
        [f"results/train/{p.path}/stage.json" for p in POINTS],
    output:
        "results/stage_clean.json",
    log:
        "results/logs/clean_stage.log",
    conda:
        "../envs/scalerepro.yaml"
    resources:
        launcher="",
    params:
        cfg=sections("stage"),
    shell:
        "scalerepro clean-stage --config-json {params.cfg:q} --launcher={resources.launcher:q}"
        " --records {input} --out {output} > {log} 2>&1"
