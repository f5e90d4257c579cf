package oracle;

/**
 * The entry of the mode drivers (DLedgerRun, ControllerRun, DoubleWriteRun, RocksDBRun): their
 * first argument is "write" or "restart", the rest go to that step. One Json document on stdout;
 * anything the step throws is printed and the JVM halted with 1 (as a kill: no shutdown hook runs
 * on the store).
 */
public final class ModeRun {
    /** A driver's write or restart step. */
    public interface Step {
        void run(String[] args) throws Exception;
    }

    private ModeRun() {
    }

    public static void main(String[] args, Step write, Step restart) {
        Json.claimStdout();
        try {
            ("write".equals(args[0]) ? write : restart).run(args);
        } catch (Throwable e) {
            e.printStackTrace();
            Runtime.getRuntime().halt(1);
        }
    }
}
