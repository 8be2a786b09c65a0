# scalerepro: reproduce large-scale synchronous data-parallel ImageNet training
# (Ying et al. 2018; Kumar et al. 2017; Cho et al. 2017) and measure a cluster
# against the published results. This file is the table of contents only.
#
#   laptop:  make run   (= snakemake --cores 2 --profile workflow/profiles/laptop)
#   SLURM:   snakemake --profile workflow/profiles/slurm --configfile config/cluster.yaml

from snakemake.utils import min_version

from scalerepro.config import check_config_files, validate_in_place

min_version("9.0")

# Each config file read as the package reads one: a syntax error, an empty file or a key given twice is named with
# its file and lines (Snakemake names no file and keeps the last of a repeated key). A --configfile that is not
# YAML at all Snakemake itself refuses before this file runs.
check_config_files(["config/config.yaml", *workflow.overwrite_configfiles])


configfile: "config/config.yaml"


# Schema check plus cross-field checks; every bad key is named before any job runs.
CFG = validate_in_place(config)  # against the schema shipped in the package: src/scalerepro/schemas/


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/simulate.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        "results/metrics.json",
        "results/analysis/costmodel.json",
        "results/reproduction.md",
        "results/stage_clean.json",
        MLPERF_LOGS,
        PLOTS,
        PLOTS_SVG,
