#!/usr/bin/env bash
# Build the real-broker test oracle: RocketMQ's own store code from its Maven Central release jars,
# driven by the project's Java classes under compat/src (tests/oracle.py runs them).
#
#   bash scripts/build_oracle.sh [VERSION...]      default: every supported version
#
# Per version V, into ${ROCKETMQ_ORACLE_HOME:-$HOME/.cache/rocketmq-recovery-oracle}/V:
#   lib/      org.apache.rocketmq:rocketmq-store:V and its runtime dependencies (mvn, from a generated pom)
#   classes/  javac of compat/src/common plus compat/src/v4 (4.x) or compat/src/v5 (5.x)
#   stamp     what it was built from; an unchanged version is not built again
# Each version is built in a temporary directory and renamed into place: a version directory is
# either complete or absent. If Maven Central cannot be reached the script says so in one line
# naming the artifact and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
SUPPORTED=(4.9.7 4.9.8 5.3.3 5.4.0 5.5.1)
HOME_DIR=${ROCKETMQ_ORACLE_HOME:-$HOME/.cache/rocketmq-recovery-oracle}
[ $# -gt 0 ] && VERSIONS=("$@") || VERSIONS=("${SUPPORTED[@]}")

if { ! command -v mvn || ! command -v javac; } >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get install -y -q maven openjdk-17-jdk-headless >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q maven openjdk-17-jdk-headless >/dev/null 2>&1; } || true
fi
for tool in mvn javac; do
    command -v "$tool" >/dev/null 2>&1 || { echo "error: build_oracle: '$tool' not found on PATH (apt-get install -y maven openjdk-17-jdk-headless)" >&2; exit 1; }
done
mkdir -p "$HOME_DIR"
exec 9>"$HOME_DIR/.lock"
flock 9    # one build at a time per oracle home
rm -rf "$HOME_DIR"/.build-* "$HOME_DIR"/.old-*    # left by a build that was killed

pom() {  # the generated pom: the store release and what it pulls in at run time
    local extra=""
    # 4.x: rocketmq-store excludes DLedger's slf4j-api, which DLedgerCommitLog needs at run time
    case "$1" in 4.*) extra="<dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>1.7.7</version></dependency>";; esac
    cat <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>rocketmq-recovery</groupId><artifactId>broker-oracle-$1</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.rocketmq</groupId><artifactId>rocketmq-store</artifactId><version>$1</version></dependency>
    $extra
  </dependencies>
</project>
EOF
}

sources() {  # the driver sources of version $1, sorted
    local set=v5
    case "$1" in 4.*) set=v4;; esac
    find compat/src/common compat/src/$set -name '*.java' 2>/dev/null | LC_ALL=C sort
}

for v in "${VERSIONS[@]}"; do
    case " ${SUPPORTED[*]} " in *" $v "*) ;; *) echo "error: build_oracle: unsupported version $v (supported: ${SUPPORTED[*]})" >&2; exit 1;; esac
    dest=$HOME_DIR/$v
    lib_stamp=$(pom "$v" | sha256sum | cut -c1-64)
    src_stamp=$( (echo "$lib_stamp"; sources "$v" | while read -r f; do echo "$f"; cat "$f"; done) | sha256sum | cut -c1-64)
    if [ -f "$dest/stamp" ] && [ "$(cat "$dest/stamp")" = "$src_stamp" ]; then
        continue
    fi
    tmp=$(mktemp -d "$HOME_DIR/.build-$v.XXXXXX")
    chmod 755 "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    if [ -f "$dest/lib.stamp" ] && [ "$(cat "$dest/lib.stamp")" = "$lib_stamp" ]; then
        cp -al "$dest/lib" "$tmp/lib"    # the jars did not change: only the driver is rebuilt
    else
        pom "$v" > "$tmp/pom.xml"
        if ! (cd "$tmp" && mvn -B -q -Dstyle.color=never dependency:copy-dependencies -DincludeScope=runtime \
                -DoutputDirectory="$tmp/lib" > "$tmp/mvn.log" 2>&1); then
            echo "error: build_oracle: mvn could not resolve org.apache.rocketmq:rocketmq-store:$v and its dependencies from Maven Central ($(sed 's/\x1b\[[0-9;]*m//g' "$tmp/mvn.log" | grep -m1 -E 'ERROR' | cut -c1-240))" >&2
            exit 1
        fi
        rm -f "$tmp/pom.xml" "$tmp/mvn.log"
    fi
    echo "$lib_stamp" > "$tmp/lib.stamp"
    mapfile -t srcs < <(sources "$v")
    [ ${#srcs[@]} -gt 0 ] || { echo "error: build_oracle: no driver sources under compat/src" >&2; exit 1; }
    mkdir -p "$tmp/classes"
    if ! javac -nowarn -encoding UTF-8 -proc:none -d "$tmp/classes" -cp "$tmp/lib/*" "${srcs[@]}" > "$tmp/javac.log" 2>&1; then
        cat "$tmp/javac.log" >&2
        echo "error: build_oracle: javac of the driver failed against rocketmq-store $v" >&2
        exit 1
    fi
    rm -f "$tmp/javac.log"
    echo "$src_stamp" > "$tmp/stamp"
    # swap into place: the old directory (if any) is moved aside first, then removed
    if [ -e "$dest" ]; then
        old=$(mktemp -d "$HOME_DIR/.old-$v.XXXXXX")
        mv "$dest" "$old/"
        mv "$tmp" "$dest"
        rm -rf "$old"
    else
        mv "$tmp" "$dest"
    fi
    trap - EXIT
    echo "build_oracle: rocketmq-store $v ready in $dest ($(ls "$dest/lib" | wc -l) jars)"
done
