package oracle;

import java.io.PrintStream;
import java.util.Map;

/**
 * The drivers' output: exactly one JSON document on the process's stdout (tests/oracle.py parses
 * it). {@link #claimStdout} is called first in every main: the store's own loggers and anything
 * else that prints go to stderr from then on.
 */
public final class Json {
    private static PrintStream out;

    private Json() {
    }

    public static void claimStdout() {
        out = System.out;
        System.setOut(System.err);
    }

    public static void emit(Object value) {
        StringBuilder sb = new StringBuilder();
        write(sb, value);
        out.println(sb);
        out.flush();
    }

    @SuppressWarnings("unchecked")
    static void write(StringBuilder sb, Object o) {
        if (o == null) {
            sb.append("null");
        } else if (o instanceof String) {
            string(sb, (String) o);
        } else if (o instanceof Double || o instanceof Float) {
            double d = ((Number) o).doubleValue();
            sb.append(Double.isFinite(d) ? String.valueOf(d) : "null");
        } else if (o instanceof Number || o instanceof Boolean) {
            sb.append(o);
        } else if (o instanceof Map) {
            sb.append('{');
            String sep = "";
            for (Map.Entry<Object, Object> e : ((Map<Object, Object>) o).entrySet()) {
                sb.append(sep);
                sep = ",";
                string(sb, String.valueOf(e.getKey()));
                sb.append(':');
                write(sb, e.getValue());
            }
            sb.append('}');
        } else if (o instanceof Iterable) {
            sb.append('[');
            String sep = "";
            for (Object x : (Iterable<Object>) o) {
                sb.append(sep);
                sep = ",";
                write(sb, x);
            }
            sb.append(']');
        } else if (o instanceof long[]) {
            sb.append('[');
            long[] a = (long[]) o;
            for (int i = 0; i < a.length; i++) {
                sb.append(i == 0 ? "" : ",").append(a[i]);
            }
            sb.append(']');
        } else {
            string(sb, String.valueOf(o));
        }
    }

    private static void string(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '\t': sb.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        sb.append(String.format("\\u%04x", (int) c));
                    } else {
                        sb.append(c);
                    }
            }
        }
        sb.append('"');
    }
}
