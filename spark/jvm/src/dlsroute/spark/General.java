package dlsroute.spark;

import java.io.Serializable;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.serializer.SerializerInstance;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.catalyst.CatalystTypeConverters$;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection$;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.types.DataTypeUtils$;
import org.apache.spark.sql.types.StructType;

import scala.Function1;
import scala.collection.immutable.Seq;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;

/**
 * A query made only of projections, run as a UDF on one row.
 *
 * <p>{@code spark/mapping.py} builds its general Catalyst mapping (every form of raw record,
 * every dead letter) once, over an empty source, and wraps its optimised plan here. The job
 * that runs then holds a small plan (the source, {@link FastMap}, this UDF in the branch of
 * the records FastMap declines), so Catalyst optimises, plans and generates code for a few
 * expressions per batch instead of the whole general mapping, and the rows FastMap maps never
 * touch it. The row goes through the same expressions, in the same order, as the plan would
 * have run them: same bytes. The expressions travel serialized in a broadcast (once per
 * executor, not inside every task), and a task that meets a declined row reads its own copy:
 * expressions hold state while they run (the variables of a lambda), so tasks must not
 * share them.
 */
public final class General implements UDF1<Row, Row> {
    private static final long serialVersionUID = 1L;

    /** The projections, bottom up, with the input of each, and the row types. */
    static final class Plan implements Serializable {
        private static final long serialVersionUID = 1L;
        final ArrayList<Seq<Expression>> stages = new ArrayList<>();
        final ArrayList<Seq<Attribute>> inputs = new ArrayList<>();
        StructType inSchema;
        StructType outSchema;
    }

    private static final ClassTag<Plan> PLAN = ClassTag$.MODULE$.apply(Plan.class);

    private final Broadcast<byte[]> plan;
    private final StructType outSchema;

    private transient UnsafeProjection[] projections;
    private transient Function1<Object, Object> toCatalyst;
    private transient Function1<Object, Object> toScala;

    private General(Broadcast<byte[]> plan, StructType outSchema) {
        this.plan = plan;
        this.outSchema = outSchema;
    }

    /**
     * The UDF of {@code query}'s optimised plan, which must be projections over one leaf
     * (its input: a struct of the leaf's columns; its output: a struct of the query's).
     */
    public static General of(Dataset<Row> query) {
        org.apache.spark.sql.classic.Dataset<Row> q = (org.apache.spark.sql.classic.Dataset<Row>) query;
        LogicalPlan p = q.queryExecution().optimizedPlan();
        List<Project> chain = new ArrayList<>();
        while (p instanceof Project proj) {
            chain.add(proj);
            p = proj.child();
        }
        if (chain.isEmpty() || !p.children().isEmpty()) {
            throw new IllegalArgumentException("not projections over one source: " + p.nodeName());
        }
        Collections.reverse(chain);
        Plan plan = new Plan();
        for (Project proj : chain) {
            @SuppressWarnings("unchecked")
            Seq<Expression> exprs = (Seq<Expression>) (Seq<?>) proj.projectList();
            plan.stages.add(exprs);
            plan.inputs.add(proj.child().output());
        }
        plan.inSchema = DataTypeUtils$.MODULE$.fromAttributes(p.output());
        plan.outSchema = q.schema();
        ByteBuffer buf = serializer().serialize(plan, PLAN);
        byte[] bytes = new byte[buf.remaining()];
        buf.get(bytes);
        JavaSparkContext sc = JavaSparkContext.fromSparkContext(q.sparkSession().sparkContext());
        return new General(sc.broadcast(bytes), plan.outSchema);
    }

    /** Spark's closure serializer (Java serialisation with the executor's class loader). */
    private static SerializerInstance serializer() {
        return SparkEnv.get().closureSerializer().newInstance();
    }

    /** Registers {@code query} as the UDF {@code name} of its session; returns it. */
    public static General register(String name, Dataset<Row> query) {
        General g = of(query);
        ((org.apache.spark.sql.classic.Dataset<Row>) query).sparkSession().udf()
                .register(name, g, g.outSchema);
        return g;
    }

    private void init() {
        Plan pl = serializer().deserialize(ByteBuffer.wrap(plan.value()), PLAN);
        UnsafeProjection[] ps = new UnsafeProjection[pl.stages.size()];
        TaskContext tc = TaskContext.get();
        int partition = tc == null ? 0 : tc.partitionId();
        for (int i = 0; i < ps.length; i++) {
            ps[i] = UnsafeProjection$.MODULE$.create(pl.stages.get(i), pl.inputs.get(i));
            ps[i].initialize(partition);
        }
        toCatalyst = CatalystTypeConverters$.MODULE$.createToCatalystConverter(pl.inSchema);
        toScala = CatalystTypeConverters$.MODULE$.createToScalaConverter(pl.outSchema);
        projections = ps;
    }

    @Override
    public Row call(Row in) {
        if (in == null) {
            return null;
        }
        if (projections == null) {
            init();
        }
        InternalRow r = (InternalRow) toCatalyst.apply(in);
        for (UnsafeProjection p : projections) {
            r = p.apply(r);
        }
        return (Row) toScala.apply(r);
    }
}
