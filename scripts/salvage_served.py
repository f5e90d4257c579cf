#!/usr/bin/env python3
"""Development check after `restart_check.sh` with KEEP=1 JOB_ARGS=--salvage (ORACLE_WORK as argument).

For each kept restart-check case: the broker's max phy equals the salvaged store's end, and every
salvaged record is served at its new queue offset with its UNIQ_KEY and a good body CRC."""
import json, sys, glob, os
for d in sorted(glob.glob(sys.argv[1] + '/*/*')):
    try:
        r = json.load(open(d + '/restart.json')); m = json.load(open(d + '/out/MANIFEST.json'))
    except FileNotFoundError:
        continue
    s = m.get('salvaged')
    moved = {x['newPhyOffset']: x for x in s['moved']} if s else {}
    served = 0
    for t, qs in r['consumeQueues'].items():
        for q, v in qs.items():
            for e in v.get('entries', []):
                if isinstance(e, dict) and e.get('phy') in moved:
                    x = moved[e['phy']]
                    if e['q'] == x['newQueueOffset'] and e.get('uniqKey') == x['uniqKey'] and e.get('bodyCrcOk') \
                            and e.get('msgQueueOffset') == e['q']:
                        served += 1
    print(f"{os.path.relpath(d, sys.argv[1])}: broker maxPhy {r['maxPhyOffset']} == salvaged end "
          f"{s and s['newMaxPhyOffset']}: {r['maxPhyOffset'] == (s and s['newMaxPhyOffset'])}; "
          f"served {served}/{len(moved)} salvaged records (new queue offset, UNIQ_KEY, body CRC)")
