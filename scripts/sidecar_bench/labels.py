"""The Docker label keys sidecar-bench puts on its containers and images (org.sidecar-bench.*), in one place.

A run's leftovers and every container of ours are found by the container labels (job.remove_stale_containers,
scripts/cleanup.py, the task cgroup's sweep); whether an image is current is read from its inputs-digest label;
the run file's environment copies the image labels. Images and containers on engines carry these keys
already: change none of them (the task-image Dockerfiles spell the variant label too).
"""

PREFIX = "org.sidecar-bench."

# Every container of a run (containers.labels), and the task topology's helpers.
PROJECT_LABEL = PREFIX + "project"
PROJECT = "sidecar-bench"  # the value of PROJECT_LABEL
CONDITION_LABEL = PREFIX + "condition"
RUN_LABEL = PREFIX + "run"
PART_LABEL = PREFIX + "part"
# The task topology's reader: the task cgroup it stands for (taskcgroup's sweep finds the name on it).
TASK_CGROUP_LABEL = PREFIX + "task-cgroup"

# The engine's lease container (lease.py): the lease's id, and its holder under LEASE_PREFIX (host, pid,
# user, checkout, what, started, max-s).
LEASE_LABEL = PREFIX + "lease"
LEASE_PREFIX = LEASE_LABEL + "."

# Images (image.build_variant): the variant, the digest of its inputs, its base image, the host's Node.js that
# built the Next.js app, and one PREFIX + <file name> label per file of the image's versions folder (go-version,
# haproxy-version, haproxy-config-sha256, ...).
VARIANT_LABEL = PREFIX + "variant"
INPUTS_DIGEST_LABEL = PREFIX + "inputs-digest"
BASE_IMAGE_LABEL = PREFIX + "base-image"
NEXT_BUILD_NODE_LABEL = PREFIX + "next-build-node-version"
HAPROXY_VERSION_LABEL = PREFIX + "haproxy-version"
HAPROXY_CONFIG_DIGEST_LABEL = PREFIX + "haproxy-config-sha256"
# The short-lived container that reads an image's versions folder.
IMAGE_HELPER_LABEL = PREFIX + "image-helper"
# Containers of a study script (scripts/dev/openloop_limits.py): the study's name.
STUDY_LABEL = PREFIX + "study"
