# The HTML report: `snakemake --report results/report.html` after a run
# collects the figures and tables marked with report() in analysis.smk.


report: "../report/workflow.rst"
