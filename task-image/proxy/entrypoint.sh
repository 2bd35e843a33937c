#!/bin/bash
# [proxy] begin
# The entrypoint of the -proxy images: task-image/entrypoint.sh plus the blocks marked
# [proxy], which start a real proxy (PROXY=haproxy|haproxy-nolog) as the proxy role. A copy, so that
# the article's images and every run on them keep their content digest (tests/test_proxy.py checks
# that the two differ only in those blocks).
# [proxy] end
# Entrypoint of the sidecar-bench task image: one container = one ECS-style task.
# Starts the app (APP_TYPE=go|next) and SIDECAR_COUNT sidecars (roles proxy, agent,
# log_router, in that order) at SIDECAR_LOAD % of one core each (SIDECAR_BURN=wall|cpu
# time, default wall as in the article), all in this
# container's cgroup; writes "ROLE PID" lines to /run/sidecar-bench/roles; forwards
# SIGTERM/SIGINT to every process; exits with the app's status if the app dies.
set -u

ROLES_FILE=/run/sidecar-bench/roles
SIDECAR_ROLES=(proxy agent log_router)
GO_APP=/app/app-go
NEXT_SERVER=/app-next/server.js
SIDECAR_SCRIPT=/sidecar/sidecar.py
STOP_GRACE_S=5

fail() {
    echo "entrypoint: $*" >&2
    exit 64
}

APP_TYPE=${APP_TYPE-}
SIDECAR_COUNT=${SIDECAR_COUNT-0}
SIDECAR_LOAD=${SIDECAR_LOAD-0}
SIDECAR_BURN=${SIDECAR_BURN-wall}
# [proxy] begin
PROXY=${PROXY-busy-loop}
HAPROXY_CONFIG=/etc/haproxy/sidecar.cfg
PROXY_ACCESS_LOG_FILE=/var/log/proxy/access.log
# [proxy] end

# --- validate the environment before starting anything -------------------------
case "$APP_TYPE" in
    go)
        [[ -x $GO_APP ]] || fail "APP_TYPE='go' but this image has no Go app ($GO_APP); use a sidecar-bench/task:go* image" ;;
    next)
        [[ -f $NEXT_SERVER ]] || fail "APP_TYPE='next' but this image has no Next.js app ($NEXT_SERVER); use a sidecar-bench/task:next* image" ;;
    *)
        fail "APP_TYPE='$APP_TYPE' is not one of: go, next" ;;
esac

[[ $SIDECAR_COUNT =~ ^[0-9]+$ ]] && (( 10#$SIDECAR_COUNT <= 3 )) \
    || fail "SIDECAR_COUNT='$SIDECAR_COUNT' is not an integer in 0..3"
SIDECAR_COUNT=$((10#$SIDECAR_COUNT))

# A decimal percent in 0..100, checked without floating point (bash has none).
[[ $SIDECAR_LOAD =~ ^([0-9]+)(\.([0-9]*))?$ ]] \
    || fail "SIDECAR_LOAD='$SIDECAR_LOAD' is not a number in 0..100 (percent of one core per sidecar)"
load_int=$((10#${BASH_REMATCH[1]}))
load_frac=${BASH_REMATCH[3]}
if (( load_int > 100 )) || { (( load_int == 100 )) && [[ $load_frac =~ [1-9] ]]; }; then
    fail "SIDECAR_LOAD='$SIDECAR_LOAD' is not a number in 0..100 (percent of one core per sidecar)"
fi

case "$SIDECAR_BURN" in
    wall|cpu) ;;
    *) fail "SIDECAR_BURN='$SIDECAR_BURN' is not one of: wall, cpu" ;;
esac

if (( SIDECAR_COUNT > 0 )) && [[ ! -f $SIDECAR_SCRIPT ]]; then
    fail "SIDECAR_COUNT='$SIDECAR_COUNT' but this image has no sidecar ($SIDECAR_SCRIPT): app-only variant; use sidecar-bench/task:${APP_TYPE}-sidecar"
fi

# [proxy] begin
case "$PROXY" in
    busy-loop) ;;
    haproxy|haproxy-nolog)
        (( SIDECAR_COUNT >= 1 )) || fail "PROXY='$PROXY' needs SIDECAR_COUNT >= 1 (the proxy is the first sidecar)"
        [[ -f $HAPROXY_CONFIG ]] || fail "PROXY='$PROXY' but this image has no $HAPROXY_CONFIG" ;;
    *) fail "PROXY='$PROXY' is not one of: busy-loop, haproxy, haproxy-nolog" ;;
esac
# [proxy] end

# --- start the processes -------------------------------------------------------
mkdir -p "${ROLES_FILE%/*}"
rm -f "$ROLES_FILE"

declare -A ROLE_OF=()
PIDS=()
stopping=0

stop_all() {
    local sig=$1
    stopping=1
    echo "entrypoint: SIG$sig received, stopping ${#PIDS[@]} process(es)" >&2
    kill "-$sig" "${PIDS[@]}" 2>/dev/null
}
trap 'stop_all TERM' TERM
trap 'stop_all INT' INT

case "$APP_TYPE" in
    go)
        "$GO_APP" &
        ;;
    next)
        # Docker sets HOSTNAME to the container id; Next's standalone server binds to
        # $HOSTNAME, so give it the wildcard address explicitly.
        HOSTNAME=0.0.0.0 PORT=8080 NODE_ENV=production NEXT_TELEMETRY_DISABLED=1 \
            node "$NEXT_SERVER" &
        ;;
esac
APP_PID=$!
ROLE_OF[$APP_PID]=app
PIDS+=("$APP_PID")
roles="app $APP_PID"$'\n'

for (( i = 0; i < SIDECAR_COUNT; i++ )); do
    role=${SIDECAR_ROLES[$i]}
    # [proxy] begin
    if [[ $role == proxy && $PROXY == haproxy ]]; then
        # Access log lines go to HAProxy's stdout (haproxy.cfg), kept in a file for a log router.
        PROXY_ACCESS_LOG=file haproxy -db -f "$HAPROXY_CONFIG" > "$PROXY_ACCESS_LOG_FILE" &
    elif [[ $role == proxy && $PROXY == haproxy-nolog ]]; then
        haproxy -db -f "$HAPROXY_CONFIG" &
    else
    # [proxy] end
    python3 "$SIDECAR_SCRIPT" --role "$role" --load "$SIDECAR_LOAD" --burn "$SIDECAR_BURN" &
    # [proxy] begin
    fi
    # [proxy] end
    ROLE_OF[$!]=$role
    PIDS+=("$!")
    roles+="$role $!"$'\n'
done

printf '%s' "$roles" > "$ROLES_FILE.tmp" && mv "$ROLES_FILE.tmp" "$ROLES_FILE"
echo "entrypoint: started APP_TYPE=$APP_TYPE SIDECAR_COUNT=$SIDECAR_COUNT SIDECAR_LOAD=$SIDECAR_LOAD:" \
    $(tr '\n' ' ' < "$ROLES_FILE") >&2

# --- supervise -----------------------------------------------------------------
exit_code=0
ended=
while (( ! stopping )); do
    wait -n -p ended
    status=$?
    [[ -z ${ended-} ]] && continue           # a trapped signal interrupted wait
    role=${ROLE_OF[$ended]:-unknown}
    if [[ $role == app ]]; then
        echo "entrypoint: app (pid $ended) exited with status $status; stopping the sidecars" >&2
        exit_code=$status
    else
        echo "entrypoint: sidecar $role (pid $ended) exited with status $status; stopping the task" >&2
        exit_code=70
    fi
    stopping=1
    kill -TERM "${PIDS[@]}" 2>/dev/null
done

# Give everything a short grace period, then kill what is left.
for (( t = 0; t < STOP_GRACE_S * 10; t++ )); do
    alive=0
    for pid in "${PIDS[@]}"; do
        kill -0 "$pid" 2>/dev/null && alive=1
    done
    (( alive )) || break
    sleep 0.1
done
kill -KILL "${PIDS[@]}" 2>/dev/null
if [[ -z ${ended-} ]]; then
    # Stopped by a signal: report the app's own exit status (e.g. 143 after SIGTERM).
    wait "$APP_PID" 2>/dev/null
    exit_code=$?
fi
wait 2>/dev/null
exit "$exit_code"
