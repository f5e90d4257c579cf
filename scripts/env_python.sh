#!/usr/bin/env bash
# bin/python of the environment archive (scripts/build_env_archive.sh): starts a Python 3.11 of the
# machine it runs on as this environment's interpreter, so the archive does not depend on where the
# build machine keeps its Python. The first of these that exists:
#   <pyvenv.cfg home>/python3.11   the build's base Python (or ENV_PYTHON_PREFIX/bin): first, since
#                                  Python takes its standard library from that home when it exists
#   $ROCKETMQ_ENV_PYTHON           a node's Python 3.11 that is not on PATH
#   python3.11 on PATH
# The interpreter runs with argv[0] set to this file, which is how Python finds ../pyvenv.cfg and
# takes this directory's parent as sys.prefix (its site-packages).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
home=
while IFS='=' read -r key value; do
    if [ "${key//[[:space:]]/}" = home ]; then
        home=${value//[[:space:]]/}
    fi
done < "$here/../pyvenv.cfg"
for python in "${home:+$home/python3.11}" "${ROCKETMQ_ENV_PYTHON:-}" "$(command -v python3.11)"; do
    if [ -n "$python" ] && [ -x "$python" ]; then
        exec -a "$here/python" "$python" "$@"
    fi
done
echo "error: no Python 3.11 for $here/python: put python3.11 on PATH or set ROCKETMQ_ENV_PYTHON" >&2
exit 127
