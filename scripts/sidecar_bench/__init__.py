"""sidecar-bench's library, by stage (data flows one way: config -> conditions -> images -> runs -> summary ->
tables, charts). The rule scripts in scripts/ are thin adapters over these modules' main functions.

Config and conditions: experiment (config.yaml validated, the preset resolved), conditions (a condition, its id,
its load settings), knobs (the knobs against throttling on the engine), taskcgroup (the task topology), proxy (a
real proxy in the request path), calibration (the model's calibration cells).

Images: image (builds the task and load-generator images on each host).

Runs: runjob (what a run job is given: its command line, the workflow's settings), jobserver (the job's process
forked from one that has the library imported) -> job (the run job: an
engine, its lease, progress) -> runner (one run's sequence) -> measurement and
task_measurement (the steps on the engine) -> cgroup (and hostreads: a local task's snapshot read from this host),
hey, openloop, warmup, environment (what is read) ->
record (the run file). Their plumbing: hosts, sshconn, transports (the SDK's SSH transport left out where no
engine needs it), lease, engine_hold (a workflow's lease for all its jobs), containers, channel (the load generator's steps over
its attached stdin and stdout), labels, signals, failures, checks, preload (the imports a run needs after its load, made while
it waits on the engine).

Summary: runfile (reading run files), stats (per run and per condition), repstats and intervals (repetitions and
intervals), timeseries (drift), flags, breaking (breaking points), adaptive (more repetitions where intervals are
wide), capacity (the open loop's base rates), loadmodel (closed- or open-loop rows), harness_gaps (the harness's
time between runs, for the provenance).

Tables and charts: cells (what both read), table_format, tables (the article's), findings (its findings checked by
rule), burn_tables, model_tables, mitigations, layouts, proxy_tables, openloop_report; chart_files (and render_worker,
which draws beside a chart stage), vlspec (compound
charts as specs), charts, burn_charts, model_charts, mitigation_charts, layout_charts; model and forward (the
CPU-budget model); reference (the article's numbers); set_report (a published set's page).

Development: codedeps (the code each analysis rule depends on), synthetic (run files for tests).
"""
