package dlsroute.spark;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import org.apache.spark.TaskContext;
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

/**
 * A query made only of projections, run as a UDF on one row.
 *
 * <p>{@code spark/mapping.py} builds its general Catalyst mapping (every form of raw record,
 * every dead letter) once, over an empty source, and wraps its optimised plan here. The job
 * that runs then holds a small plan (the source, {@link FastMap}, this UDF in the branch of
 * the records FastMap declines), so Catalyst optimises, plans and generates code for a few
 * expressions per batch instead of the whole general mapping, and the rows FastMap maps never
 * touch it. The row goes through the same expressions, in the same order, as the plan would
 * have run them: same bytes.
 */
public final class General implements UDF1<Row, Row> {
    private static final long serialVersionUID = 1L;

    private final ArrayList<Seq<Expression>> stages;
    private final ArrayList<Seq<Attribute>> inputs;
    private final StructType inSchema;
    private final StructType outSchema;

    private transient UnsafeProjection[] projections;
    private transient Function1<Object, Object> toCatalyst;
    private transient Function1<Object, Object> toScala;

    @SuppressWarnings("unchecked")
    private General(List<Project> chain, Seq<Attribute> leaf, StructType out) {
        stages = new ArrayList<>();
        inputs = new ArrayList<>();
        for (Project p : chain) {
            stages.add((Seq<Expression>) (Seq<?>) p.projectList());
            inputs.add(p.child().output());
        }
        inSchema = DataTypeUtils$.MODULE$.fromAttributes(leaf);
        outSchema = out;
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
        return new General(chain, p.output(), q.schema());
    }

    /** Registers {@code query} as the UDF {@code name} of its session; returns it. */
    public static General register(String name, Dataset<Row> query) {
        General g = of(query);
        ((org.apache.spark.sql.classic.Dataset<Row>) query).sparkSession().udf()
                .register(name, g, g.outSchema);
        return g;
    }

    private void init() {
        UnsafeProjection[] ps = new UnsafeProjection[stages.size()];
        TaskContext tc = TaskContext.get();
        int partition = tc == null ? 0 : tc.partitionId();
        for (int i = 0; i < ps.length; i++) {
            ps[i] = UnsafeProjection$.MODULE$.create(stages.get(i), inputs.get(i));
            ps[i].initialize(partition);
        }
        toCatalyst = CatalystTypeConverters$.MODULE$.createToCatalystConverter(inSchema);
        toScala = CatalystTypeConverters$.MODULE$.createToScalaConverter(outSchema);
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
