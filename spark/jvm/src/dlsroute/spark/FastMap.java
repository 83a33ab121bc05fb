package dlsroute.spark;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;

/**
 * The DLS mapping of the common raw JSON record, as a Java UDF (no Python on the path).
 *
 * <p>{@code call(config, value)} maps one raw event or raw subscription the way the Python
 * SDK would (labels, headers and value bytes bit for bit) when the record is of the plain
 * kind this class knows, and returns null for anything else: another form, anything unusual
 * and every record the SDK would refuse. {@code spark/mapping.py} then maps the null rows
 * with its general Catalyst expressions, which also write the dead letters, so this class
 * never has to explain a refusal.
 *
 * <p>Accepted: a JSON object (ASCII only, no escapes in strings, each key once) with the
 * fields {@code node}, {@code client}, {@code id}, an optional {@code op} equal to the
 * kind's op, and
 * <ul>
 *   <li>events: {@code attrs}, an object giving every attribute of the space once, numbers
 *       (integers up to 15 digits) for numeric attributes and strings for discrete ones,
 *       inside the domain; an optional string {@code payload};</li>
 *   <li>subscriptions: {@code where}, a text of predicates joined by {@code and}, each
 *       comparing one numeric attribute (at most once) with finite numbers
 *       ({@code <, <=, >, >=, =} or {@code between x and y} with x &lt;= y), or excluding
 *       finite numbers from one ({@code != x}, {@code not in (x, y)}, any number of times),
 *       within the label budget.</li>
 * </ul>
 *
 * <p>A space with an optional, string or hashed attribute is not this class's: its config says
 * {@code decline all}, and every record goes to the general path. A subscription using
 * {@code !=}, {@code not in}, {@code prefix}, {@code exists}, {@code missing}, {@code or} or
 * parentheses is declined by the text reader below, but for {@code !=} and {@code not in} of
 * finite numbers on numeric attributes (exclusions remove no cell; a range of the one value
 * they exclude matches nothing, and is declined).
 *
 * <p>The config (first argument) is built by {@code spark.mapping._fast_config}: lines of
 * space-separated fields, strings as hex of their UTF-8 bytes, doubles as hex of their bits.
 * The result is {@code struct<topic:binary,value:binary,label:binary,origin:binary,
 * eid:binary>} (the topic's name as UTF-8 and the three header values; subscriptions leave
 * those null).
 *
 * <p>In a sharded network (config {@code shards} above 1) an event goes to its label's
 * shard's topic ({@code fmix64(label)} modulo the shards, unsigned, as
 * {@code dls.shards.label_shard}), and a subscription is split as the SDK splits it: the
 * result has a sixth field, {@code parts: array<struct<topic:binary,value:binary>>}, one
 * LabelSubscription per shard its labels fall in, holding that shard's labels (the other
 * fields null).
 */
public final class FastMap implements UDF2<byte[], byte[], Row> {
    private static final long serialVersionUID = 1L;

    /** The config of the last call and what it parses to (tasks reuse one literal array). */
    private transient volatile Object[] cache;

    @Override
    public Row call(byte[] config, byte[] value) {
        if (config == null || value == null) {
            return null;
        }
        Object[] c = cache;
        Config cfg;
        if (c != null && (c[0] == config || Arrays.equals((byte[]) c[0], config))) {
            cfg = (Config) c[1];
        } else {
            cfg = new Config(config);
            cache = new Object[] {config, cfg};
        }
        if (cfg.declineAll) {
            return null;
        }
        try {
            return cfg.event ? mapEvent(cfg, value) : mapSubscription(cfg, value);
        } catch (RuntimeException e) {
            // Anything this reader did not foresee goes to the general path, never fails the task.
            return null;
        }
    }

    // -- config ----------------------------------------------------------------------------
    static final int UNIFORM = 0;
    static final int BREAKPOINTS = 1;
    static final int DISCRETE = 2;

    static final class Config {
        final boolean event;
        /**
         * The space has attributes this class does not know (optional, string, hashed): every
         * record goes to the general path.
         */
        final boolean declineAll;
        final String prefix;
        final byte[] header;
        final long appPrefix;
        final long budget;
        final int maxTopic;
        /** The network's label shards (1: unsharded topic names). */
        final int shards;
        /** The longest shard part of a topic name ({@code .s<shards-1>}; 0 unsharded). */
        final int shardPad;
        final String[] names;
        final int[] type;
        final double[] low;
        final double[] high;
        final double[] span;
        final double[] granules;
        final double[][] breakpoints;
        final String[][] values;
        final int[] shift;
        final byte[] topicHead;
        final byte[] publishTail = ".publish".getBytes(StandardCharsets.UTF_8);
        final byte[] subscribeTail = ".subscribe".getBytes(StandardCharsets.UTF_8);

        Config(byte[] raw) {
            String[] lines = new String(raw, StandardCharsets.UTF_8).split("\n");
            int nAttrs = 0;
            for (String line : lines) {
                if (line.startsWith("attr ")) {
                    nAttrs++;
                }
            }
            names = new String[nAttrs];
            type = new int[nAttrs];
            low = new double[nAttrs];
            high = new double[nAttrs];
            span = new double[nAttrs];
            granules = new double[nAttrs];
            breakpoints = new double[nAttrs][];
            values = new String[nAttrs][];
            shift = new int[nAttrs];
            boolean ev = false;
            boolean off = false;
            String pre = null;
            byte[] hdr = null;
            long app = 0;
            long bud = 0;
            int maxT = 0;
            int nShards = 1;
            int i = 0;
            for (String line : lines) {
                String[] f = line.split(" ");
                switch (f[0]) {
                    case "kind" -> ev = f[1].equals("event");
                    case "decline" -> off = true;
                    case "prefix" -> pre = str(f[1]);
                    case "header" -> hdr = unhex(f[1]);
                    case "app" -> app = Long.parseLong(f[1]);
                    case "budget" -> bud = Long.parseLong(f[1]);
                    case "maxtopic" -> maxT = Integer.parseInt(f[1]);
                    case "shards" -> nShards = Integer.parseInt(f[1]);
                    case "attr" -> {
                        names[i] = str(f[1]);
                        shift[i] = Integer.parseInt(f[2]);
                        switch (f[3]) {
                            case "u" -> {
                                type[i] = UNIFORM;
                                low[i] = dbl(f[4]);
                                high[i] = dbl(f[5]);
                                granules[i] = Long.parseLong(f[6]);
                            }
                            case "b" -> {
                                type[i] = BREAKPOINTS;
                                low[i] = dbl(f[4]);
                                high[i] = dbl(f[5]);
                                breakpoints[i] = new double[f.length - 6];
                                for (int j = 6; j < f.length; j++) {
                                    breakpoints[i][j - 6] = dbl(f[j]);
                                }
                            }
                            default -> {
                                type[i] = DISCRETE;
                                values[i] = new String[f.length - 4];
                                for (int j = 4; j < f.length; j++) {
                                    values[i][j - 4] = str(f[j]);
                                }
                            }
                        }
                        span[i] = high[i] - low[i];
                        i++;
                    }
                    default -> { }
                }
            }
            event = ev;
            declineAll = off;
            prefix = pre;
            topicHead = (pre + ".node.").getBytes(StandardCharsets.UTF_8);
            header = hdr;
            appPrefix = app;
            budget = bud;
            maxTopic = maxT;
            shards = nShards;
            shardPad = nShards == 1 ? 0 : (".s" + (nShards - 1)).length();
        }

        static byte[] unhex(String s) {
            byte[] out = new byte[s.length() / 2];
            for (int k = 0; k < out.length; k++) {
                out[k] = (byte) Integer.parseInt(s.substring(2 * k, 2 * k + 2), 16);
            }
            return out;
        }

        static String str(String hex) {
            return hex.equals("-") ? "" : new String(unhex(hex), StandardCharsets.UTF_8);
        }

        static double dbl(String hex) {
            return Double.longBitsToDouble(Long.parseUnsignedLong(hex, 16));
        }

        int attrIndex(byte[] b, int s, int e) {
            for (int k = 0; k < names.length; k++) {
                if (equalsAscii(names[k], b, s, e)) {
                    return k;
                }
            }
            return -1;
        }

        /** The cell of an in-domain double, as {@code dls.space}'s {@code cell}. */
        long cell(int a, double v) {
            if (type[a] == UNIFORM) {
                double g = granules[a];
                return Math.min((long) g - 1, (long) Math.floor(((v - low[a]) * g) / span[a]));
            }
            double[] bps = breakpoints[a];
            long n = 0;
            for (double bp : bps) {
                if (bp <= v) {
                    n++;
                }
            }
            return n;
        }
    }

    /** A JSON integer of at most 15 characters (already checked by the reader). */
    static long parseLong(byte[] b, int s, int e) {
        boolean neg = b[s] == '-';
        long v = 0;
        for (int k = neg ? s + 1 : s; k < e; k++) {
            v = v * 10 + (b[k] - '0');
        }
        return neg ? -v : v;
    }

    static boolean equalsAscii(String s, byte[] b, int start, int end) {
        int n = end - start;
        if (s.length() != n) {
            return false;
        }
        for (int k = 0; k < n; k++) {
            if (s.charAt(k) != (char) b[start + k]) {
                return false;
            }
        }
        return true;
    }

    // -- a strict JSON reader ----------------------------------------------------------------
    /** Thrown (preallocated, no stack) when a record is not of the accepted kind. */
    static final class Decline extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Decline() {
            super(null, null, false, false);
        }
    }

    static final Decline DECLINE = new Decline();

    static final class Reader {
        final byte[] b;
        int i;
        /** Start and end (exclusive) of the last string read. */
        int s;
        int e;

        Reader(byte[] b) {
            this.b = b;
        }

        void ws() {
            while (i < b.length) {
                byte c = b[i];
                if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
                    i++;
                } else {
                    return;
                }
            }
        }

        void expect(char c) {
            ws();
            if (i >= b.length || b[i] != c) {
                throw DECLINE;
            }
            i++;
        }

        boolean peek(char c) {
            ws();
            return i < b.length && b[i] == c;
        }

        /** A string without escapes, of printable ASCII (what any JSON reader reads alike). */
        void string() {
            expect('"');
            s = i;
            while (true) {
                if (i >= b.length) {
                    throw DECLINE;
                }
                byte c = b[i];
                if (c == '"') {
                    e = i;
                    i++;
                    return;
                }
                if (c == '\\' || c < 0x20 || c == 0x7f) {  // escapes, controls and non-ASCII
                    throw DECLINE;
                }
                i++;
            }
        }

        boolean key(String k) {
            return equalsAscii(k, b, s, e);
        }

        String text() {
            return new String(b, s, e - s, StandardCharsets.ISO_8859_1);
        }

        /**
         * A JSON number: sets {@code s}, {@code e}; returns true for an integer (no fraction
         * or exponent).
         */
        boolean number() {
            ws();
            s = i;
            if (i < b.length && b[i] == '-') {
                i++;
            }
            int d0 = i;
            if (i < b.length && b[i] == '0') {
                i++;
            } else {
                while (i < b.length && b[i] >= '0' && b[i] <= '9') {
                    i++;
                }
            }
            if (i == d0) {
                throw DECLINE;
            }
            boolean integer = true;
            if (i < b.length && b[i] == '.') {
                integer = false;
                i++;
                int f0 = i;
                while (i < b.length && b[i] >= '0' && b[i] <= '9') {
                    i++;
                }
                if (i == f0) {
                    throw DECLINE;
                }
            }
            if (i < b.length && (b[i] == 'e' || b[i] == 'E')) {
                integer = false;
                i++;
                if (i < b.length && (b[i] == '+' || b[i] == '-')) {
                    i++;
                }
                int x0 = i;
                while (i < b.length && b[i] >= '0' && b[i] <= '9') {
                    i++;
                }
                if (i == x0) {
                    throw DECLINE;
                }
            }
            e = i;
            return integer;
        }

        void end() {
            ws();
            if (i != b.length) {
                throw DECLINE;
            }
        }
    }

    /** A name of letters, digits, '_' and '-' (it goes into a topic name). */
    static boolean isName(byte[] b, int s, int e) {
        if (e <= s) {
            return false;
        }
        for (int k = s; k < e; k++) {
            byte c = b[k];
            boolean ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
                    || c == '_' || c == '-';
            if (!ok) {
                return false;
            }
        }
        return true;
    }

    // -- Avro output -------------------------------------------------------------------------
    static final class Out {
        byte[] buf = new byte[256];
        int n;

        void ensure(int more) {
            if (n + more > buf.length) {
                buf = Arrays.copyOf(buf, Math.max(buf.length * 2, n + more));
            }
        }

        void raw(byte[] src, int s, int len) {
            ensure(len);
            System.arraycopy(src, s, buf, n, len);
            n += len;
        }

        void b(int x) {
            ensure(1);
            buf[n++] = (byte) x;
        }

        /** Avro long: zig-zag, then 7 bits a byte, low first. */
        void varint(long v) {
            long z = (v << 1) ^ (v >> 63);
            ensure(10);
            while ((z & ~0x7FL) != 0) {
                buf[n++] = (byte) ((z & 0x7F) | 0x80);
                z >>>= 7;
            }
            buf[n++] = (byte) z;
        }

        void bytes(byte[] src, int s, int e) {
            varint(e - s);
            raw(src, s, e - s);
        }

        void dbl(double d) {
            long bits = Double.doubleToRawLongBits(d);
            ensure(8);
            for (int k = 0; k < 8; k++) {
                buf[n++] = (byte) (bits >>> (8 * k));
            }
        }

        void be8(long v) {
            ensure(8);
            for (int k = 7; k >= 0; k--) {
                buf[n++] = (byte) (v >>> (8 * k));
            }
        }

        byte[] done() {
            return Arrays.copyOf(buf, n);
        }
    }

    static byte[] be8(long v) {
        byte[] out = new byte[8];
        for (int k = 0; k < 8; k++) {
            out[k] = (byte) (v >>> (8 * (7 - k)));
        }
        return out;
    }

    // -- the fields every raw record has -------------------------------------------------------
    static final int NODE = 1;
    static final int CLIENT = 2;
    static final int ID = 4;
    static final int OP = 8;
    static final int BODY = 16;  // attrs / where
    static final int PAYLOAD = 32;

    /** Reads the common field at the reader's key into {@code se} (start, end); its bit. */
    static int common(Reader r, int[] se, String op) {
        int bit;
        if (r.key("node")) {
            bit = NODE;
        } else if (r.key("client")) {
            bit = CLIENT;
        } else if (r.key("id")) {
            bit = ID;
        } else if (r.key("op")) {
            bit = OP;
        } else {
            return 0;
        }
        r.expect(':');
        r.string();
        if (bit == OP) {
            if (!r.key(op)) {
                throw DECLINE;
            }
        } else {
            int k = bit == NODE ? 0 : bit == CLIENT ? 2 : 4;
            se[k] = r.s;
            se[k + 1] = r.e;
        }
        return bit;
    }

    /**
     * The node topic's name as UTF-8 bytes (ASCII: the node is a checked name); of label
     * shard {@code shard} in a sharded network ({@code .s<shard>} before the tail), else -1.
     * Declines a node whose name would make the topic of the last shard too long (the
     * general path's rule: a dead letter, whichever shard the record takes).
     */
    static byte[] topic(Config c, byte[] tail, int shard, byte[] b, int s, int e) {
        byte[] head = c.topicHead;
        if (head.length + (e - s) + c.shardPad + tail.length > c.maxTopic) {
            throw DECLINE;
        }
        byte[] part = shard < 0 ? new byte[0]
                : (".s" + shard).getBytes(StandardCharsets.US_ASCII);
        byte[] t = new byte[head.length + (e - s) + part.length + tail.length];
        System.arraycopy(head, 0, t, 0, head.length);
        System.arraycopy(b, s, t, head.length, e - s);
        System.arraycopy(part, 0, t, head.length + (e - s), part.length);
        System.arraycopy(tail, 0, t, head.length + (e - s) + part.length, tail.length);
        return t;
    }

    /** MurmurHash3's 64-bit finaliser (Java's long arithmetic wraps, as it must). */
    public static long fmix64(long k) {
        k ^= k >>> 33;
        k *= 0xff51afd7ed558ccdL;
        k ^= k >>> 33;
        k *= 0xc4ceb9fe1a85ec53L;
        k ^= k >>> 33;
        return k;
    }

    /** The label shard of a label, as {@code dls.shards.label_shard}. */
    public static int labelShard(long label, int shards) {
        return shards == 1 ? 0 : (int) Long.remainderUnsigned(fmix64(label), shards);
    }

    /** Marks a field as seen; a repeated field declines the record. */
    static int mark(int seen, int bit) {
        if ((seen & bit) != 0) {
            throw DECLINE;
        }
        return seen | bit;
    }

    /** After a member of an object: true if another follows (','), false at its '}'. */
    static boolean next(Reader r) {
        if (r.peek(',')) {
            r.i++;
            return true;
        }
        r.expect('}');
        return false;
    }

    /** The end of a record: nothing after it, every required field there, names valid. */
    static void close(Reader r, int seen, byte[] b, int[] se) {
        r.end();
        if ((seen & (NODE | CLIENT | ID | BODY)) != (NODE | CLIENT | ID | BODY)) {
            throw DECLINE;
        }
        checkNames(b, se);
    }

    static void checkNames(byte[] b, int[] se) {
        if (!isName(b, se[0], se[1]) || !isName(b, se[2], se[3]) || se[5] <= se[4]) {
            throw DECLINE;
        }
    }

    // -- events ------------------------------------------------------------------------------
    static Row mapEvent(Config c, byte[] b) {
        Reader r = new Reader(b);
        int[] se = new int[6];
        int n = c.names.length;
        if (n > 62) {
            throw DECLINE;  // the bit sets below hold 62 attributes
        }
        // Attribute values in the record's order: attribute index, key span, kind, number.
        int[] order = new int[n];
        int[] keyS = new int[n];
        int[] keyE = new int[n];
        int[] kind = new int[n];  // 0 long, 1 double, 2 string
        long[] lv = new long[n];
        double[] dv = new double[n];
        int[] strS = new int[n];
        int[] strE = new int[n];
        int payS = 0;
        int payE = 0;
        int seen = 0;
        int nAttrs = 0;
        long label = c.appPrefix;
        r.expect('{');
        if (r.peek('}')) {
            throw DECLINE;
        }
        do {
            r.string();
            int bit = common(r, se, "publish");
            if (bit == 0) {
                if (r.key("attrs")) {
                    bit = BODY;
                    r.expect(':');
                    r.expect('{');
                    if (r.peek('}')) {
                        throw DECLINE;
                    }
                    long have = 0;
                    do {
                        r.string();
                        int a = c.attrIndex(b, r.s, r.e);
                        if (a < 0 || nAttrs >= n || (have & (1L << a)) != 0) {
                            throw DECLINE;
                        }
                        have |= 1L << a;
                        order[nAttrs] = a;
                        keyS[nAttrs] = r.s;
                        keyE[nAttrs] = r.e;
                        r.expect(':');
                        long cell;
                        if (c.type[a] == DISCRETE) {
                            r.string();
                            kind[nAttrs] = 2;
                            strS[nAttrs] = r.s;
                            strE[nAttrs] = r.e;
                            cell = -1;
                            String[] vals = c.values[a];
                            for (int k = 0; k < vals.length; k++) {
                                if (equalsAscii(vals[k], b, r.s, r.e)) {
                                    cell = k;
                                    break;
                                }
                            }
                            if (cell < 0) {
                                throw DECLINE;
                            }
                        } else {
                            boolean integer = r.number();
                            double f;
                            if (integer) {
                                if (r.e - r.s > 15) {  // exact as a double, and compares alike
                                    throw DECLINE;
                                }
                                long v = parseLong(b, r.s, r.e);
                                kind[nAttrs] = 0;
                                lv[nAttrs] = v;
                                f = (double) v;
                            } else {
                                f = Double.parseDouble(new String(b, r.s, r.e - r.s,
                                        StandardCharsets.ISO_8859_1));
                                kind[nAttrs] = 1;
                                dv[nAttrs] = f;
                            }
                            if (!(c.low[a] <= f && f <= c.high[a])) {  // NaN and inf too
                                throw DECLINE;
                            }
                            cell = c.cell(a, f);
                        }
                        label |= cell << c.shift[a];
                        nAttrs++;
                    } while (next(r));
                    if (nAttrs != n) {
                        throw DECLINE;
                    }
                } else if (r.key("payload")) {
                    bit = PAYLOAD;
                    r.expect(':');
                    r.string();
                    payS = r.s;
                    payE = r.e;
                } else {
                    throw DECLINE;
                }
            }
            seen = mark(seen, bit);
        } while (next(r));
        close(r, seen, b, se);
        byte[] topic = topic(c, c.publishTail, c.shards == 1 ? -1 : labelShard(label, c.shards),
                b, se[0], se[1]);
        Out o = new Out();
        o.raw(c.header, 0, c.header.length);
        o.bytes(b, se[0], se[1]);
        o.bytes(b, se[2], se[3]);
        o.bytes(b, se[4], se[5]);
        o.varint(n);
        for (int k = 0; k < n; k++) {
            o.bytes(b, keyS[k], keyE[k]);
            switch (kind[k]) {
                case 0 -> {
                    o.b(0);
                    o.varint(lv[k]);
                }
                case 1 -> {
                    o.b(2);
                    o.dbl(dv[k]);
                }
                default -> {
                    o.b(4);
                    o.bytes(b, strS[k], strE[k]);
                }
            }
        }
        o.b(0);
        o.bytes(b, payS, payE);
        int ol = se[1] - se[0] + 1 + se[3] - se[2];
        byte[] origin = new byte[ol];
        System.arraycopy(b, se[0], origin, 0, se[1] - se[0]);
        origin[se[1] - se[0]] = '/';
        System.arraycopy(b, se[2], origin, se[1] - se[0] + 1, se[3] - se[2]);
        return RowFactory.create(topic, o.done(), be8(label), origin,
                Arrays.copyOfRange(b, se[4], se[5]));
    }

    // -- subscriptions -----------------------------------------------------------------------
    static Row mapSubscription(Config c, byte[] b) {
        Reader r = new Reader(b);
        int[] se = new int[6];
        int whereS = 0;
        int whereE = 0;
        int seen = 0;
        r.expect('{');
        if (r.peek('}')) {
            throw DECLINE;
        }
        do {
            r.string();
            int bit = common(r, se, "subscribe");
            if (bit == 0) {
                if (!r.key("where")) {
                    throw DECLINE;
                }
                bit = BODY;
                r.expect(':');
                r.string();
                whereS = r.s;
                whereE = r.e;
            }
            seen = mark(seen, bit);
        } while (next(r));
        close(r, seen, b, se);
        byte[] topic = topic(c, c.subscribeTail, -1, b, se[0], se[1]);
        long[][] cells = cells(c, b, whereS, whereE);
        // The cross product, the first attribute varying slowest: sorted, as the SDK's.
        long total = 1;
        for (long[] lh : cells) {
            total *= lh[1] - lh[0] + 1;
            if (total > c.budget || total > (1 << 20)) {
                throw DECLINE;
            }
        }
        int n = cells.length;
        long[] labels = new long[(int) total];
        long[] cur = new long[n];
        for (int k = 0; k < n; k++) {
            cur[k] = cells[k][0];
        }
        for (int t = 0; t < labels.length; t++) {
            long lab = c.appPrefix;
            for (int k = 0; k < n; k++) {
                lab |= cur[k] << c.shift[k];
            }
            labels[t] = lab;
            for (int k = n - 1; k >= 0; k--) {
                if (cur[k] < cells[k][1]) {
                    cur[k]++;
                    break;
                }
                cur[k] = cells[k][0];
            }
        }
        if (c.shards == 1) {
            return RowFactory.create(topic, subscription(c, b, se, whereS, whereE, labels, null,
                    0), null, null, null);
        }
        // A part per shard the labels fall in, in shard order, each with its labels in
        // order (the SDK's split): same id, client and where.
        int[] of = new int[labels.length];
        int[] count = new int[c.shards];
        for (int t = 0; t < labels.length; t++) {
            of[t] = labelShard(labels[t], c.shards);
            count[of[t]]++;
        }
        List<Row> parts = new ArrayList<>();
        for (int k = 0; k < c.shards; k++) {
            if (count[k] > 0) {
                parts.add(RowFactory.create(topic(c, c.subscribeTail, k, b, se[0], se[1]),
                        subscription(c, b, se, whereS, whereE, labels, of, k)));
            }
        }
        return RowFactory.create(null, null, null, null, null, parts);
    }

    /**
     * A LabelSubscription's bytes: the record's client, id and where, and its labels (those
     * of shard {@code shard} when {@code of}, each label's shard, is given).
     */
    static byte[] subscription(Config c, byte[] b, int[] se, int whereS, int whereE,
            long[] labels, int[] of, int shard) {
        Out lb = new Out();
        lb.ensure(labels.length * 8);
        for (int t = 0; t < labels.length; t++) {
            if (of == null || of[t] == shard) {
                lb.be8(labels[t]);
            }
        }
        Out o = new Out();
        o.ensure(c.header.length + lb.n + (whereE - whereS) + 40);
        o.raw(c.header, 0, c.header.length);
        o.bytes(b, se[2], se[3]);
        o.bytes(b, se[4], se[5]);
        o.bytes(lb.buf, 0, lb.n);
        o.b(2);  // the string branch of ["null", "string"]
        o.bytes(b, whereS, whereE);
        o.b(0);  // row: null (the node compiles the where text)
        return o.done();
    }

    static boolean isWordChar(byte c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
                || c == '_' || c == '.' || c == '-';
    }

    static boolean isLetter(byte c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    }

    /** Skips spaces; false at the end of the text. */
    static int spaces(byte[] b, int i, int e) {
        while (i < e && b[i] == ' ') {
            i++;
        }
        return i;
    }

    /** End of the word starting at i ([A-Za-z_][A-Za-z0-9_.-]*), or -1. */
    static int word(byte[] b, int i, int e) {
        if (i >= e || !(isLetter(b[i]) || b[i] == '_')) {
            return -1;
        }
        i++;
        while (i < e && isWordChar(b[i])) {
            i++;
        }
        return i;
    }

    static boolean keyword(byte[] b, int s, int e, String kw) {
        if (e - s != kw.length()) {
            return false;
        }
        for (int k = 0; k < kw.length(); k++) {
            if (Character.toLowerCase((char) b[s + k]) != kw.charAt(k)) {
                return false;
            }
        }
        return true;
    }

    /**
     * End of the number token starting at i, as the text form's tokenizer reads it
     * ({@code [-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?}), followed by a space or the end; or -1.
     */
    static int numberEnd(byte[] b, int i, int e) {
        if (i < e && (b[i] == '+' || b[i] == '-')) {
            i++;
        }
        int d0 = i;
        while (i < e && b[i] >= '0' && b[i] <= '9') {
            i++;
        }
        boolean digits = i > d0;
        if (i < e && b[i] == '.') {
            i++;
            int f0 = i;
            while (i < e && b[i] >= '0' && b[i] <= '9') {
                i++;
            }
            digits |= i > f0;
        }
        if (!digits) {
            return -1;
        }
        if (i < e && (b[i] == 'e' || b[i] == 'E')) {
            int x = i + 1;
            if (x < e && (b[x] == '+' || b[x] == '-')) {
                x++;
            }
            int x0 = x;
            while (x < e && b[x] >= '0' && b[x] <= '9') {
                x++;
            }
            if (x == x0) {
                return -1;  // "1e": the tokenizer would refuse a letter after the number
            }
            i = x;
        }
        return (i == e || b[i] == ' ') ? i : -1;
    }

    /** A finite number token (15 characters at most: an integer is exact as a double). */
    static double finite(byte[] b, int s, int e) {
        if (e < 0 || e - s > 15) {
            throw DECLINE;
        }
        double v = Double.parseDouble(new String(b, s, e - s, StandardCharsets.ISO_8859_1));
        if (Double.isNaN(v) || Double.isInfinite(v)) {
            throw DECLINE;
        }
        return v;
    }

    /**
     * End of the exclusion starting at i ({@code != v} or {@code not in (v, ...)} of finite
     * number tokens), or -1 when there is none there.
     */
    static int exclusions(byte[] b, int i, int e) {
        if (i + 1 < e && b[i] == '!' && b[i + 1] == '=') {
            int v = spaces(b, i + 2, e);
            int ne = numberEnd(b, v, e);
            finite(b, v, ne);
            return ne;
        }
        int ke = word(b, i, e);
        if (ke < 0 || !keyword(b, i, ke, "not") || ke == e || b[ke] != ' ') {
            return -1;
        }
        int k = spaces(b, ke, e);
        int ie = word(b, k, e);
        if (ie < 0 || !keyword(b, k, ie, "in")) {
            throw DECLINE;
        }
        k = spaces(b, ie, e);
        if (k >= e || b[k] != '(') {
            throw DECLINE;
        }
        while (true) {
            k = spaces(b, k + 1, e);
            int ne = listNumberEnd(b, k, e);
            finite(b, k, ne);
            k = spaces(b, ne, e);
            if (k < e && b[k] == ')') {
                return k + 1;
            }
            if (k >= e || b[k] != ',') {
                throw DECLINE;
            }
        }
    }

    /** The values of the exclusion {@code b[s..x)} (see {@link #exclusions}), added to old. */
    static double[] excludedValues(byte[] b, int s, int x, double[] old) {
        List<Double> vals = new ArrayList<>();
        if (old != null) {
            for (double v : old) {
                vals.add(v);
            }
        }
        int k = b[s] == '!' ? s + 2 : s;
        while (k < x) {
            byte ch = b[k];
            if (ch == '+' || ch == '-' || ch == '.' || (ch >= '0' && ch <= '9')) {
                int ne = listNumberEnd(b, k, x);
                vals.add(finite(b, k, ne));
                k = ne;
            } else if (isLetter(ch)) {
                k = word(b, k, x);  // "not", "in"
            } else {
                k++;
            }
        }
        double[] out = new double[vals.size()];
        for (int t = 0; t < out.length; t++) {
            out[t] = vals.get(t);
        }
        return out;
    }

    /** {@link #numberEnd}, where a number in a list may also end at ',' or ')'. */
    static int listNumberEnd(byte[] b, int i, int e) {
        int end = i;
        while (end < e && b[end] != ',' && b[end] != ')' && b[end] != ' ') {
            end++;
        }
        int ne = numberEnd(b, i, end);
        return ne == end ? ne : -1;
    }

    /** First and last cell per attribute of a text {@code where}. */
    static long[][] cells(Config c, byte[] b, int s, int e) {
        int n = c.names.length;
        if (n > 62) {
            throw DECLINE;
        }
        double[] lo = new double[n];
        double[] hi = new double[n];
        boolean[] loc = new boolean[n];
        boolean[] hic = new boolean[n];
        for (int a = 0; a < n; a++) {
            lo[a] = c.low[a];
            hi[a] = c.high[a];
            loc[a] = true;
            hic[a] = true;
        }
        long used = 0;
        // Values excluded by != and not in, per attribute (they remove no cell; only a range
        // of one value they exclude matches nothing, which the general path names).
        double[][] excluded = new double[n][];
        int i = spaces(b, s, e);
        if (i == e) {
            throw DECLINE;  // everything: leave it to the general path
        }
        while (true) {
            int we = word(b, i, e);
            if (we < 0) {
                throw DECLINE;
            }
            int a = c.attrIndex(b, i, we);
            if (a < 0 || c.type[a] == DISCRETE) {
                throw DECLINE;
            }
            i = spaces(b, we, e);
            int xe = exclusions(b, i, e);
            if (xe >= 0) {
                excluded[a] = excludedValues(b, i, xe, excluded[a]);
                i = spaces(b, xe, e);
                if (i == e) {
                    break;
                }
                int ae = word(b, i, e);
                if (ae < 0 || !keyword(b, i, ae, "and") || ae == e || b[ae] != ' ') {
                    throw DECLINE;
                }
                i = spaces(b, ae, e);
                continue;
            }
            if ((used & (1L << a)) != 0) {
                throw DECLINE;
            }
            used |= 1L << a;
            double plo;
            double phi;
            boolean ploc = true;
            boolean phic = true;
            if (i < e && (b[i] == '<' || b[i] == '>' || b[i] == '=')) {
                byte op = b[i];
                boolean eq = op != '=' && i + 1 < e && b[i + 1] == '=';
                i = spaces(b, i + (eq ? 2 : 1), e);
                int ne = numberEnd(b, i, e);
                double v = finite(b, i, ne);
                i = ne;
                if (op == '=') {
                    plo = v;
                    phi = v;
                } else if (op == '<') {
                    plo = Double.NEGATIVE_INFINITY;
                    phi = v;
                    phic = eq;
                } else {
                    plo = v;
                    phi = Double.POSITIVE_INFINITY;
                    ploc = eq;
                }
            } else {
                int ke = word(b, i, e);
                if (ke < 0 || !keyword(b, i, ke, "between") || ke == e || b[ke] != ' ') {
                    throw DECLINE;
                }
                i = spaces(b, ke, e);
                int ne = numberEnd(b, i, e);
                plo = finite(b, i, ne);
                i = spaces(b, ne, e);
                int ae = word(b, i, e);
                if (ae < 0 || !keyword(b, i, ae, "and") || ae == e || b[ae] != ' ') {
                    throw DECLINE;
                }
                i = spaces(b, ae, e);
                ne = numberEnd(b, i, e);
                phi = finite(b, i, ne);
                i = ne;
                if (plo > phi) {
                    throw DECLINE;  // inverted: the general path names it
                }
            }
            // The intersection with the domain, as dls.predicates._intersect.
            if (plo > lo[a]) {
                lo[a] = plo;
                loc[a] = ploc;
            } else if (plo == lo[a]) {
                loc[a] = loc[a] && ploc;
            }
            if (phi < hi[a]) {
                hi[a] = phi;
                hic[a] = phic;
            } else if (phi == hi[a]) {
                hic[a] = hic[a] && phic;
            }
            i = spaces(b, i, e);
            if (i == e) {
                break;
            }
            int ae = word(b, i, e);
            if (ae < 0 || !keyword(b, i, ae, "and") || ae == e || b[ae] != ' ') {
                throw DECLINE;
            }
            i = spaces(b, ae, e);
        }
        long[][] out = new long[n][];
        for (int a = 0; a < n; a++) {
            if (c.type[a] == DISCRETE) {
                out[a] = new long[] {0, c.values[a].length - 1};
                continue;
            }
            double el = loc[a] ? lo[a] : Math.nextUp(lo[a]);
            double eh = hic[a] ? hi[a] : Math.nextDown(hi[a]);
            if (el > eh) {
                throw DECLINE;  // matches nothing: the general path names it
            }
            if (el == eh && excluded[a] != null) {
                for (double x : excluded[a]) {
                    if (x == el) {
                        throw DECLINE;  // its one value excluded: matches nothing
                    }
                }
            }
            out[a] = new long[] {c.cell(a, el), c.cell(a, eh)};
        }
        return out;
    }
}
