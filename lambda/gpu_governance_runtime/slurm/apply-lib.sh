# Functions of the generated governance script (render.py puts them ahead of the plan's calls).
#
# Every gg_* function compares what the cluster has with what the plan wants and changes only
# the difference, logging one line per change, so a second run reports `changed=0`. Nothing here
# cancels, requeues or signals a job: objects that still have jobs are left in place with a
# warning, and the run says so in its summary.
#
# Environment: GG_DRY_RUN=1 reports what would change and changes nothing.
#              GG_NODE_MAP=file with lines "<instance group> <slurm hostlist>"; unset on HyperPod,
#              where the map is read from GG_RESOURCE_CONFIG (HyperPod's resource_config.json).
#              GG_FRAGMENT=slurm.conf fragment this script owns (default beside slurm.conf).

GG_DRY_RUN=${GG_DRY_RUN:-0}
GG_RESOURCE_CONFIG=${GG_RESOURCE_CONFIG:-/opt/ml/config/resource_config.json}
GG_CHANGED=0
GG_UNCHANGED=0
GG_WARNINGS=0
GG_FRAGMENT_BODY=""
declare -A GG_DECLARED_QOS=() GG_DECLARED_ACCOUNTS=() GG_DECLARED_USERS=() GG_NODES=()
# What slurmdbd had when the run began, read in two sacctmgr calls rather than one per object.
# Each object is compared once, and objects are created before anything refers to them, so the
# snapshot never needs refreshing.
declare -A GG_HAVE_QOS=() GG_HAVE_PREEMPT=() GG_HAVE_ACCOUNT=() GG_HAVE_USER=()

gg_log() { printf 'gpu-governance: %s\n' "$*"; }
gg_warn() { GG_WARNINGS=$((GG_WARNINGS + 1)); gg_log "WARNING: $*"; }
gg_fail() { gg_log "ERROR: $*"; exit 1; }
gg_same() { GG_UNCHANGED=$((GG_UNCHANGED + 1)); }

# Log and perform one change (or only log it in a dry run).
gg_change() {
    local what=$1; shift
    GG_CHANGED=$((GG_CHANGED + 1))
    if [[ $GG_DRY_RUN == 1 ]]; then
        gg_log "would change: $what"
        return
    fi
    gg_log "changed: $what"
    "$@" >/dev/null || gg_fail "command failed for '$what': $*"
}

gg_sacctmgr() { sacctmgr -i "$@"; }
gg_show() { sacctmgr -n -P show "$@"; }

gg_begin() {
    local tool
    [[ $EUID -eq 0 ]] || gg_fail "run as root: it manages OS groups, directories and Slurm accounting"
    if [[ $GG_OS_ONLY == 0 ]]; then
        for tool in sacctmgr scontrol squeue; do
            command -v "$tool" >/dev/null || gg_fail "$tool not found; run this on the Slurm head node (or pass --os-only)"
        done
        sacctmgr -n list cluster >/dev/null 2>&1 || gg_fail "sacctmgr cannot reach slurmdbd: accounting must be enabled"
        gg_read_accounting
    fi
    gg_log "applying governance of organisation $GG_ORGANISATION (policy $GG_POLICY_DIGEST)$([[ $GG_DRY_RUN == 1 ]] && echo ', dry run')$([[ $GG_OS_ONLY == 1 ]] && echo ', OS only')"
}

# --- accounting ---------------------------------------------------------------------------

gg_read_accounting() {
    local name priority grptres description preempt gracetime maxtrespa maxwall flags account user rest
    while IFS='|' read -r name priority grptres description preempt gracetime maxtrespa maxwall flags; do
        GG_HAVE_QOS[$name]="$priority|$grptres|$description|$(gg_seconds "$gracetime")|$maxtrespa|${maxwall:+$(($(gg_seconds "$maxwall") / 60))}|$flags"
        GG_HAVE_PREEMPT[$name]=$preempt
    done < <(gg_show qos format=name,priority,grptres,description,preempt,gracetime,maxtrespa,maxwall,flags)
    # A user's value is its own limits: MaxJobs and GrpTRES (fields 7 and 8 of the rest).
    while IFS='|' read -r account user rest; do
        if [[ -z $user ]]; then GG_HAVE_ACCOUNT[$account]=$rest; else GG_HAVE_USER["$user@$account"]=$(cut -d'|' -f7,8 <<<"$rest"); fi
    done < <(gg_show assoc format=account,user,parentname,fairshare,qos,defaultqos,grpjobs,grptresmins,maxjobs,grptres)
}

# sacctmgr prints GraceTime as [D-]HH:MM:SS; the plan gives seconds.
gg_seconds() {
    local text=${1:-0} days=0 h m s
    [[ $text == *-* ]] && { days=${text%%-*}; text=${text#*-}; }
    if [[ $text == *:*:* ]]; then
        IFS=: read -r h m s <<<"$text"
        echo $(((10#$days * 24 + 10#$h) * 3600 + 10#$m * 60 + 10#$s))
    else
        echo $((10#$text))
    fi
}

# gg_qos NAME PRIORITY GRP_GPUS(empty = none) GRACE_SECONDS [ACCOUNT_GPUS(MaxTRESPerAccount; empty = none)
#        [MAX_WALL_MINUTES(MaxWall; empty = none) [FLAGS(DenyOnLimit; empty = none)]]]
gg_qos() {
    local name=$1 priority=$2 gpus=$3 grace=${4:-0} account_gpus=${5:-} wall=${6:-} flags=${7:-} have want
    GG_DECLARED_QOS[$name]=1
    want="$priority|${gpus:+gres/gpu=$gpus}|$GG_MARKER|$grace|${account_gpus:+gres/gpu=$account_gpus}|$wall|$flags"
    have=${GG_HAVE_QOS[$name]:-}
    if [[ -z $have ]]; then
        gg_change "add qos $name" gg_sacctmgr add qos "$name" priority="$priority" \
            grptres="gres/gpu=${gpus:--1}" gracetime="$grace" maxtrespa="gres/gpu=${account_gpus:--1}" \
            ${wall:+maxwall="$wall"} ${flags:+flags="$flags"} description="$GG_MARKER"
    elif [[ $have != "$want" ]]; then
        gg_change "qos $name: $have -> $want" gg_sacctmgr modify qos where name="$name" set \
            priority="$priority" grptres="gres/gpu=${gpus:--1}" gracetime="$grace" maxtrespa="gres/gpu=${account_gpus:--1}" \
            maxwall="${wall:--1}" flags="${flags:--1}" description="$GG_MARKER"
    else
        gg_same
    fi
}

# Preempt lists and a Slurm 22.05 quirk (docs/slurm.md): slurmdbd checks a new list for loops
# against the lists it has cached, and `preempt=` (empty), like any `preempt+=`/`preempt-=` on a
# non-empty list, leaves a phantom QoS id 0 in the cached list of the QoS it changes. Naming that
# QoS in any preempt list then fails with "QOS Preemption loop detected" until slurmdbd restarts.
# Only a whole non-empty list (`preempt=a,b`) is cached cleanly, and `preempt-=<itself>` on an
# empty list clears the phantom. render.py calls gg_qos_preempts with empty lists first and every
# QoS after the QoS it preempts, so every empty list - emptied now, by an earlier run or by hand -
# is reset before the first list that may name it is set.
declare -a GG_EMPTY_PREEMPT=()

gg_set_preempts() {
    local empty
    for empty in "${GG_EMPTY_PREEMPT[@]}"; do
        gg_sacctmgr modify qos where name="$empty" set preempt-="$empty" || return
    done
    GG_EMPTY_PREEMPT=()
    gg_sacctmgr modify qos where name="$1" set preempt="$2"
}

# gg_qos_preempts NAME COMMA_LIST (after every QoS exists: the list names other QoS)
gg_qos_preempts() {
    local name=$1 want=$2 have
    have=${GG_HAVE_PREEMPT[$name]:-}
    [[ -n $want ]] || GG_EMPTY_PREEMPT+=("$name")
    if [[ $have == "$want" ]]; then
        gg_same
    elif [[ -z $want ]]; then
        gg_change "qos $name preempts: '$have' -> ''" gg_sacctmgr modify qos where name="$name" set preempt=
    else
        gg_change "qos $name preempts: '$have' -> '$want'" gg_set_preempts "$name" "$want"
    fi
}

# gg_account NAME PARENT FAIRSHARE [QOS_LIST DEFAULT_QOS [GRP_JOBS [GRP_GPU_MINUTES]]]; without QoS
# the account inherits its parent's (sacctmgr then shows the inherited list, so only the given
# fields are compared). GRP_JOBS 0 holds a paused team: its jobs queue but none starts, running
# ones finish; empty clears the limit (-1 clears a limit: https://slurm.schedmd.com/sacctmgr.html,
# GrpJobs). GRP_GPU_MINUTES is the team's GPU-hour limit as GrpTRESMins=gres/gpu=N: the GPU
# minutes its past, present and future jobs may use until PriorityUsageResetPeriod clears the
# usage (https://slurm.schedmd.com/sacctmgr.html, GrpTRESMins); empty clears it.
gg_account() {
    local name=$1 parent=$2 fairshare=$3 qos=${4:-} default_qos=${5:-} grp_jobs=${6:-} grp_minutes=${7:-} have want have_jobs="" have_minutes=""
    GG_DECLARED_ACCOUNTS[$name]=1
    have=${GG_HAVE_ACCOUNT[$name]:-}
    want="$parent|$fairshare"
    if [[ -n $qos ]]; then
        want+="|$qos|$default_qos"
        have_jobs=$(cut -d'|' -f5 <<<"$have")
        have_minutes=$(cut -d'|' -f6 <<<"$have")
        have=$(cut -d'|' -f1-4 <<<"$have")
    else
        have=$(cut -d'|' -f1,2 <<<"$have")
    fi
    if [[ -z $have ]]; then
        gg_change "add account $name" gg_sacctmgr add account "$name" parent="$parent" fairshare="$fairshare" \
            ${qos:+qos="$qos" defaultqos="$default_qos"} ${grp_jobs:+grpjobs="$grp_jobs"} \
            ${grp_minutes:+grptresmins="gres/gpu=$grp_minutes"} description="$GG_MARKER" organization="$GG_ORGANISATION"
        return
    fi
    local same=1
    if [[ $have != "$want" ]]; then
        same=0
        gg_change "account $name: $have -> $want" gg_sacctmgr modify account where name="$name" set \
            parent="$parent" fairshare="$fairshare" ${qos:+qos="$qos" defaultqos="$default_qos"}
    fi
    # Each limit on its own: Slurm 22.05 answers "Nothing modified" to GrpJobs=-1 beside other settings.
    if [[ -n $qos && $have_jobs != "$grp_jobs" ]]; then
        same=0
        gg_change "account $name: GrpJobs ${have_jobs:-none} -> ${grp_jobs:-none}" \
            gg_sacctmgr modify account where name="$name" set grpjobs="${grp_jobs:--1}"
    fi
    if [[ -n $qos && $have_minutes != "${grp_minutes:+gres/gpu=$grp_minutes}" ]]; then
        same=0
        gg_change "account $name: GrpTRESMins ${have_minutes:-none} -> ${grp_minutes:+gres/gpu=$grp_minutes}" \
            gg_sacctmgr modify account where name="$name" set grptresmins="gres/gpu=${grp_minutes:--1}"
    fi
    [[ $same == 0 ]] || gg_same
}

# gg_account_gpus NAME GPUS: the GrpTRES GPU cap of a group's account, which its teams' jobs count
# against together. Read here, not in gg_read_accounting: only group accounts carry it.
gg_account_gpus() {
    local name=$1 gpus=$2 have
    have=$(gg_show assoc where account="$name" format=user,grptres | awk -F'|' '$1 == "" { print $2; exit }')
    if [[ $have == "gres/gpu=$gpus" ]]; then
        gg_same
    else
        gg_change "account $name: GrpTRES '${have}' -> 'gres/gpu=$gpus'" gg_sacctmgr modify account where name="$name" set grptres="gres/gpu=$gpus"
    fi
}

# gg_user NAME ACCOUNT [MAX_JOBS [MAX_GPUS]]: the user's association under the account, with the
# team's per-member limits (MaxJobs, GrpTRES=gres/gpu; empty clears one: -1, as for accounts).
gg_user() {
    local name=$1 account=$2 jobs=${3:-} gpus=${4:-} have want
    GG_DECLARED_USERS["$name@$account"]=1
    want="$jobs|${gpus:+gres/gpu=$gpus}"
    if [[ -z ${GG_HAVE_USER["$name@$account"]+known} ]]; then
        gg_change "add user $name to account $account" gg_sacctmgr add user "$name" account="$account" \
            ${jobs:+maxjobs="$jobs"} ${gpus:+grptres="gres/gpu=$gpus"}
        return
    fi
    have=${GG_HAVE_USER["$name@$account"]}
    if [[ $have == "$want" ]]; then
        gg_same
        return
    fi
    # Each limit on its own: Slurm 22.05 answers "Nothing modified" to a -1 beside other settings.
    [[ ${have%%|*} == "$jobs" ]] || gg_change "user $name of account $account: MaxJobs ${have%%|*} -> ${jobs:-none}" \
        gg_sacctmgr modify user where name="$name" account="$account" set maxjobs="${jobs:--1}"
    [[ ${have#*|} == "${gpus:+gres/gpu=$gpus}" ]] || gg_change "user $name of account $account: GrpTRES '${have#*|}' -> '${gpus:+gres/gpu=$gpus}'" \
        gg_sacctmgr modify user where name="$name" account="$account" set grptres="gres/gpu=${gpus:--1}"
}

# Jobs still pending or running for one filter (squeue option and value), as "id,id,...".
gg_active_jobs() { squeue -h -t PD,R,S,CG,CF -o '%i' "$@" | paste -sd, -; }

# Remove what an earlier policy created and this one no longer declares - unless jobs still use
# it: those are never cancelled, they keep running and the object stays until a later run.
gg_remove_undeclared() {
    local user account name jobs
    while IFS='|' read -r user account; do
        [[ -n ${GG_DECLARED_ACCOUNTS[$account]:-} && -z ${GG_DECLARED_USERS["$user@$account"]:-} ]] || continue
        jobs=$(gg_active_jobs -u "$user" -A "$account")
        if [[ -n $jobs ]]; then
            gg_warn "user $user left the policy of account $account but has jobs $jobs; kept until they end"
        else
            gg_change "remove user $user from account $account" gg_sacctmgr delete user where name="$user" account="$account"
        fi
    done < <(gg_show assoc format=user,account | awk -F'|' '$1 != ""')

    while IFS='|' read -r name; do
        [[ -z ${GG_DECLARED_ACCOUNTS[$name]:-} ]] || continue
        jobs=$(gg_active_jobs -A "$name")
        if [[ -n $jobs ]]; then
            gg_warn "account $name left the policy but has jobs $jobs; kept until they end"
            continue
        fi
        gg_change "remove account $name" gg_sacctmgr delete account where name="$name"
    done < <(gg_show account format=account,description | awk -F'|' -v m="$GG_MARKER" '$2 == m { print $1 }')

    while IFS='|' read -r name; do
        [[ -z ${GG_DECLARED_QOS[$name]:-} ]] || continue
        jobs=$(gg_active_jobs -q "$name")
        if [[ -n $jobs ]]; then
            gg_warn "qos $name left the policy but has jobs $jobs; kept until they end"
            continue
        fi
        gg_change "remove qos $name" gg_sacctmgr delete qos where name="$name"
    done < <(gg_show qos format=name,description | awk -F'|' -v m="$GG_MARKER" '$2 == m { print $1 }')
}

# --- OS identity and data paths -----------------------------------------------------------

# gg_group NAME GID MEMBER...
gg_group() {
    local name=$1 gid=$2; shift 2
    local entry have_gid member current
    entry=$(getent group "$name" || true)
    if [[ -z $entry ]]; then
        gg_change "add group $name (gid $gid)" groupadd --gid "$gid" "$name"
        entry="$name:x:$gid:"
    else
        have_gid=$(cut -d: -f3 <<<"$entry")
        [[ $have_gid == "$gid" ]] || gg_warn "group $name has gid $have_gid, the policy says $gid; not renumbered (files on shared storage carry the old id)"
        gg_same
    fi
    current=",$(cut -d: -f4 <<<"$entry"),"
    for member in "$@"; do
        if ! id -u "$member" >/dev/null 2>&1; then
            gg_warn "user $member does not exist on this node; create it (same uid on every node) and re-apply"
        elif [[ $current != *",$member,"* ]]; then
            gg_change "add $member to group $name" gpasswd -a "$member" "$name"
        else
            gg_same
        fi
    done
    local wanted=" $* "
    for member in $(tr ',' ' ' <<<"${current//,,/,}"); do
        [[ $wanted == *" $member "* ]] || gg_change "remove $member from group $name" gpasswd -d "$member" "$name"
    done
}

# The script runs as root and hands tenants write access to the directories it creates, so it
# creates them only where nobody but root can add, remove or replace an entry on the way from /
# (checked for the path as written and as resolved): every existing component owned by root, and
# every directory among them writable by root only, or sticky like /tmp, where nobody may
# replace what root owns.
declare -A GG_TRUSTED=()

gg_trusted_dir() {
    local dir=$1 path uid mode kind
    [[ -n ${GG_TRUSTED[$dir]:-} ]] && return 0
    for path in "$dir" "$(realpath -m -- "$dir")"; do
        while :; do
            if [[ -e $path || -L $path ]]; then
                read -r uid mode kind < <(stat -c '%u %a %F' -- "$path")
                [[ $uid == 0 ]] || return 1
                [[ $kind != directory ]] || (( !(8#$mode & 8#022) || (8#$mode & 8#1000) )) || return 1
            fi
            [[ $path == / ]] && break
            path=$(dirname -- "$path")
        done
    done
    [[ ! -d $dir ]] || GG_TRUSTED[$dir]=1
}

# gg_data_path PATH GROUP MODE: create PATH (root:GROUP, MODE) if it is missing. The owner and
# mode of anything already there are never changed - it may be a user's directory or a link to
# one (a team named like a user, or a data root shared with home directories) - only reported.
gg_data_path() {
    local path=$1 group=$2 mode=$3 parent have
    parent=$(dirname -- "$path")
    if [[ -L $path || ( -e $path && ! -d $path ) ]]; then
        gg_warn "$path is not a directory this script created; left alone (the policy wants a directory root:$group $mode)"
        return
    fi
    if [[ -d $path ]]; then
        have=$(stat -c '%U:%G %a' -- "$path")
        if [[ $have == "root:$group ${mode#0}" ]]; then
            gg_same
        else
            gg_warn "$path is $have, the policy wants root:$group $mode; left alone: the script never changes a directory it did not create"
        fi
        return
    fi
    # Checked before creating a missing data root (nothing is created in someone else's tree)
    # and again after (mkdir -p changes nothing that exists, and the chain is then complete).
    if ! gg_trusted_dir "$parent" || { [[ ! -d $parent && $GG_DRY_RUN == 0 ]] &&
        gg_change "create $parent" mkdir -p -m 0755 -- "$parent" && ! gg_trusted_dir "$parent"; }; then
        gg_warn "$parent (or a directory above it) can be changed by users other than root; $path not created"
        return
    fi
    gg_change "create $path" install -d -o root -g "$group" -m "$mode" -- "$path"
}

# --- partitions and slurm.conf ------------------------------------------------------------

gg_load_node_map() {
    local group hosts
    if [[ -z ${GG_NODE_MAP:-} ]]; then
        [[ -f $GG_RESOURCE_CONFIG ]] || gg_fail "set GG_NODE_MAP (no HyperPod $GG_RESOURCE_CONFIG here)"
        GG_NODE_MAP=$(mktemp)
        # HyperPod names each Slurm node after its private IP address: ip-10-1-2-3.
        python3 - "$GG_RESOURCE_CONFIG" >"$GG_NODE_MAP" <<'PY'
import json, sys
for group in json.load(open(sys.argv[1]))["InstanceGroups"]:
    hosts = ["ip-" + i["CustomerIpAddress"].replace(".", "-") for i in group.get("Instances", [])]
    print(group["Name"], ",".join(hosts))
PY
    fi
    while read -r group hosts; do
        [[ -z $group || $group == \#* ]] || GG_NODES[$group]=$hosts
    done <"$GG_NODE_MAP"
}

# gg_setting KEY VALUE: a slurm.conf setting the governance depends on.
gg_setting() { GG_FRAGMENT_BODY+="$1=$2"$'\n'; }

# gg_partition NAME GROUPS ACCOUNTS QOS (comma lists)
gg_partition() {
    local name=$1 groups=$2 accounts=$3 qos=$4 group nodes=""
    for group in ${groups//,/ }; do
        if [[ -n ${GG_NODES[$group]:-} ]]; then
            nodes+="${nodes:+,}${GG_NODES[$group]}"
        else
            gg_warn "instance group $group has no nodes; partition $name does not include it"
        fi
    done
    if [[ -z $nodes ]]; then
        gg_warn "partition $name has no nodes and is left out"
        return
    fi
    GG_FRAGMENT_BODY+="PartitionName=$name Nodes=$nodes AllowAccounts=$accounts AllowQos=$qos OverSubscribe=NO State=UP"$'\n'
}

# Partitions of the previous fragment that this policy drops keep their line, drained (no new
# jobs), while jobs still run there.
gg_keep_busy_partitions() {
    local line name jobs
    [[ -f $GG_FRAGMENT ]] || return 0
    while read -r line; do
        name=${line#PartitionName=}; name=${name%% *}
        grep -q "^PartitionName=$name " <<<"$GG_FRAGMENT_BODY" && continue
        jobs=$(gg_active_jobs -p "$name")
        [[ -z $jobs ]] && continue
        gg_warn "partition $name left the policy but has jobs $jobs; kept, drained, until they end"
        GG_FRAGMENT_BODY+="${line/State=UP/State=DRAIN}"$'\n'
    done < <(grep '^PartitionName=' "$GG_FRAGMENT")
}

# Nodes in partition $1 now that the node map places in no instance group, comma separated: the
# capacity controller added them live (a capacity window's nodes HyperPod brought after the map
# was read; capacity/slurm_window.py). A reconfigure would drop them.
gg_unmapped_nodes() {
    local listed node mapped group
    listed=$(scontrol -o show partition "$1" 2>/dev/null | sed -n 's/.* Nodes=\([^ ]*\).*/\1/p') || return 0  # not there yet
    if [[ -z $listed || $listed == "(null)" ]]; then return 0; fi
    mapped=" "
    for group in "${!GG_NODES[@]}"; do mapped+="$(scontrol show hostnames "${GG_NODES[$group]}" | tr '\n' ' ')"; done
    for node in $(scontrol show hostnames "$listed"); do
        [[ $mapped == *" $node "* ]] || printf '%s,' "$node"
    done
}

gg_write_fragment() {
    local text="# Written by cdk-gpu-governance (policy $GG_POLICY_DIGEST); re-applied, never edit by hand."$'\n'
    local line name nodes extra kept=()
    gg_keep_busy_partitions
    text+=$GG_FRAGMENT_BODY
    if [[ -f $GG_FRAGMENT && "$(cat "$GG_FRAGMENT")"$'\n' == "$text" ]]; then
        gg_same
    else
        # The capacity controller's live additions survive the reconfigure (never in borrow: bought
        # capacity is not lent); the fragment itself names only mapped nodes.
        while read -r line; do
            name=${line#PartitionName=}; name=${name%% *}; nodes=${line#* Nodes=}; nodes=${nodes%% *}
            if [[ $name == "$GG_BORROW_PARTITION" ]]; then continue; fi
            extra=$(gg_unmapped_nodes "$name")
            if [[ -n $extra ]]; then kept+=("$name $nodes,${extra%,}"); fi
        done < <(grep '^PartitionName=' <<<"$GG_FRAGMENT_BODY")
        gg_change "write $GG_FRAGMENT and reconfigure slurmctld" bash -c 'printf "%s" "$1" >"$2" && scontrol reconfigure' _ "$text" "$GG_FRAGMENT"
        for line in "${kept[@]}"; do
            read -r name nodes <<<"$line"
            gg_change "keep nodes outside the node map in partition $name: Nodes=$nodes" scontrol update "PartitionName=$name" "Nodes=$nodes"
        done
    fi
    local slurm_conf include="Include $GG_FRAGMENT"
    slurm_conf=$(dirname "$GG_FRAGMENT")/slurm.conf
    if ! grep -qxF "$include" "$slurm_conf"; then
        gg_change "add '$include' to $slurm_conf" bash -c 'printf "%s\n" "$1" >>"$2" && scontrol reconfigure' _ "$include" "$slurm_conf"
    fi
}

# Settings that only a slurmctld restart activates: say so rather than restart under load.
gg_check_restart_settings() {
    local key want have
    [[ $GG_DRY_RUN == 1 ]] && return
    for key in PreemptType SelectType PriorityType; do
        want=$(sed -n "s/^$key=//p" <<<"$GG_FRAGMENT_BODY")
        have=$(scontrol show config | sed -n "s/^$key *= *//p")
        [[ -z $want || $have == "$want" ]] || gg_warn "$key is $have, the policy needs $want: restart slurmctld to activate it"
    done
}

gg_end() {
    gg_log "summary changed=$GG_CHANGED unchanged=$GG_UNCHANGED warnings=$GG_WARNINGS"
}
