package oracle;

import java.io.File;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.ServerSocket;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.zip.CRC32;

import io.openmessaging.storage.dledger.DLedgerServer;
import io.openmessaging.storage.dledger.entry.DLedgerEntry;
import io.openmessaging.storage.dledger.store.file.DLedgerMmapFileStore;
import org.apache.rocketmq.store.DefaultMessageStore;

/**
 * A three-member DLedger group (n0, n1, n2) in one JVM, 4.x and 5.x, each member a
 * DefaultMessageStore on BASE/&lt;id&gt; (broker.conf enableDLegerCommitLog=true):
 *
 *   oracle.DLedgerGroupRun write   BASE BROKER_CONF PUTS SEED
 *   oracle.DLedgerGroupRun restart BASE BROKER_CONF PUTS ID,ID[,ID]
 *
 * The members' ports in dLegerPeers are not stored on disk: each run writes a conf per member with
 * free ones (BASE/&lt;id&gt;.group.conf).
 * write: the three start and elect a leader L; PUTS puts (DLedgerRun#put, Random(SEED)) acked by
 *   all; one follower B shut down cleanly; PUTS more acked by L and the other follower A; A shut
 *   down cleanly; 2 puts on L alone (appended, never acked by a quorum); L halted (a kill -9).
 *   Prints the roles (leader, a, b) and each member's log as it ended.
 * restart: the members named start and elect; PUTS puts on the leader (Random(PUTS)); waits until
 *   every started member's log ends where the leader's does, all committed; prints each started
 *   member's log (every entry: index, term, pos, size, the body's CRC-32) and state, then shuts
 *   them down cleanly.
 */
public final class DLedgerGroupRun {
    static final String[] IDS = {"n0", "n1", "n2"};

    private DLedgerGroupRun() {
    }

    public static void main(String[] args) {
        ModeRun.main(args, DLedgerGroupRun::write, DLedgerGroupRun::restart);
    }

    /** One conf per member: BROKER_CONF with the group's peers on free ports and its own id. */
    static File[] confs(File base, File conf) throws Exception {
        Properties p = new Properties();
        try (InputStream in = new FileInputStream(conf)) {
            p.load(in);
        }
        StringBuilder peers = new StringBuilder();
        for (String id : IDS) {
            try (ServerSocket s = new ServerSocket(0)) {
                peers.append(peers.length() == 0 ? "" : ";").append(id).append("-127.0.0.1:").append(s.getLocalPort());
            }
        }
        File[] out = new File[IDS.length];
        for (int i = 0; i < IDS.length; i++) {
            Properties q = new Properties();
            q.putAll(p);
            q.setProperty("dLegerPeers", peers.toString());
            q.setProperty("dLegerSelfId", IDS[i]);
            out[i] = new File(base, IDS[i] + ".group.conf");
            try (OutputStream o = new FileOutputStream(out[i])) {
                q.store(o, null);
            }
        }
        return out;
    }

    static DefaultMessageStore open(File base, File conf, String id) throws Exception {
        DefaultMessageStore store = new Stores(new File(base, id), conf).store;
        if (!store.load()) {
            throw new IllegalStateException("load() failed on " + id);
        }
        store.start();
        Compat.afterStart(store);
        return store;
    }

    static DLedgerMmapFileStore log(DefaultMessageStore store) {
        return (DLedgerMmapFileStore) DLedgerRun.server(store).getdLedgerStore();
    }

    /** The member that leads, waiting up to 30 s for one. */
    static String leader(Map<String, DefaultMessageStore> up) throws InterruptedException {
        long deadline = System.currentTimeMillis() + 30_000L;
        while (System.currentTimeMillis() < deadline) {
            for (Map.Entry<String, DefaultMessageStore> e : up.entrySet()) {
                if (DLedgerRun.server(e.getValue()).getMemberState().isLeader()) {
                    return e.getKey();
                }
            }
            Thread.sleep(5);
        }
        throw new IllegalStateException("no LEADER after 30 s");
    }

    /** A member's log: its state and every entry from its begin to its end index. */
    static Map<String, Object> entries(DefaultMessageStore store) {
        DLedgerServer srv = DLedgerRun.server(store);
        DLedgerMmapFileStore fs = log(store);
        Map<String, Object> j = new LinkedHashMap<>();
        j.put("role", String.valueOf(srv.getMemberState().getRole()));
        j.put("currTerm", srv.getMemberState().currTerm());
        j.put("ledgerBeginIndex", fs.getLedgerBeginIndex());
        j.put("ledgerEndIndex", fs.getLedgerEndIndex());
        j.put("ledgerEndTerm", fs.getLedgerEndTerm());
        j.put("committedIndex", fs.getCommittedIndex());
        List<Object> rows = new ArrayList<>();
        for (long i = Math.max(fs.getLedgerBeginIndex(), 0); i <= fs.getLedgerEndIndex(); i++) {
            DLedgerEntry e = fs.get(i);
            CRC32 crc = new CRC32();
            crc.update(e.getBody());
            rows.add(Arrays.asList(e.getIndex(), e.getTerm(), e.getPos(), (long) e.getSize(), crc.getValue()));
        }
        j.put("entries", rows);
        return j;
    }

    static void write(String[] args) throws Exception {
        File base = new File(args[1]).getAbsoluteFile();
        base.mkdirs();
        int puts = Integer.parseInt(args[3]);
        Random rnd = new Random(Long.parseLong(args[4]));
        File[] confs = confs(base, new File(args[2]));
        Map<String, DefaultMessageStore> up = new LinkedHashMap<>();
        for (int i = 0; i < IDS.length; i++) {
            up.put(IDS[i], open(base, confs[i], IDS[i]));
        }
        String l = leader(up);
        List<String> followers = new ArrayList<>(up.keySet());
        followers.remove(l);
        String a = followers.get(0);
        String b = followers.get(1);
        List<Object> acked = new ArrayList<>();
        int n = 0;
        for (int i = 0; i < puts; i++) {
            acked.add(DLedgerRun.put(up.get(l), rnd, n++));
        }
        up.remove(b).shutdown();
        for (int i = 0; i < puts; i++) {
            acked.add(DLedgerRun.put(up.get(l), rnd, n++));
        }
        up.remove(a).shutdown();
        for (int i = 0; i < 2; i++) {      // appended by L, no quorum acks them
            acked.add(DLedgerRun.put(up.get(l), rnd, n++));
        }
        Map<String, Object> j = new LinkedHashMap<>();
        j.put("leader", l);
        j.put("a", a);
        j.put("b", b);
        j.put("written", acked);
        j.put("leaderLog", entries(up.get(l)));
        Json.emit(j);
        Runtime.getRuntime().halt(0);    // kill -9 of L: no shutdown hook, no checkpoint
    }

    static void restart(String[] args) throws Exception {
        File base = new File(args[1]).getAbsoluteFile();
        File[] confs = confs(base, new File(args[2]));
        int puts = Integer.parseInt(args[3]);
        Map<String, DefaultMessageStore> up = new LinkedHashMap<>();
        for (String id : args[4].split(",")) {
            up.put(id, open(base, confs[Arrays.asList(IDS).indexOf(id)], id));
        }
        String first = leader(up);
        Random rnd = new Random(puts);
        List<Object> acked = new ArrayList<>();
        for (int i = 0; i < puts; i++) {
            acked.add(DLedgerRun.put(up.get(first), rnd, i));
        }
        DLedgerMmapFileStore lead = log(up.get(first));
        long deadline = System.currentTimeMillis() + 60_000L;
        boolean caughtUp = false;
        while (System.currentTimeMillis() < deadline && !caughtUp) {
            caughtUp = true;
            for (DefaultMessageStore s : up.values()) {
                DLedgerMmapFileStore fs = log(s);
                caughtUp &= fs.getLedgerEndIndex() == lead.getLedgerEndIndex()
                    && fs.getLedgerEndTerm() == lead.getLedgerEndTerm()
                    && fs.getCommittedIndex() == lead.getLedgerEndIndex();
            }
            Thread.sleep(5);
        }
        Map<String, Object> j = new LinkedHashMap<>();
        j.put("leader", first);
        j.put("written", acked);
        j.put("caughtUp", caughtUp);
        Map<String, Object> logs = new LinkedHashMap<>();
        for (Map.Entry<String, DefaultMessageStore> e : up.entrySet()) {
            logs.put(e.getKey(), entries(e.getValue()));
        }
        j.put("logs", logs);
        for (DefaultMessageStore s : up.values()) {
            s.shutdown();
        }
        Json.emit(j);
        System.exit(0);
    }
}
