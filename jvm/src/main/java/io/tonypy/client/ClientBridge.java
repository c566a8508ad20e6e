package io.tonypy.client;

import io.tonypy.bridge.FsBridge;
import io.tonypy.bridge.Json;
import io.tonypy.bridge.LaunchSpecs;
import com.google.gson.JsonObject;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.io.DataOutputBuffer;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ApplicationReport;
import org.apache.hadoop.yarn.api.records.ApplicationSubmissionContext;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.NodeReport;
import org.apache.hadoop.yarn.api.records.NodeState;
import org.apache.hadoop.yarn.api.records.Priority;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.ResourceInformation;
import org.apache.hadoop.yarn.api.records.ResourceTypeInfo;
import org.apache.hadoop.yarn.client.api.YarnClient;
import org.apache.hadoop.yarn.client.api.YarnClientApplication;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.exceptions.YarnException;
import org.apache.hadoop.yarn.util.resource.ResourceUtils;

/**
 * The client's view of YARN, driven from Python over Py4J: cluster capacity, submit, report,
 * kill, and the FileSystem used for staging. No job logic lives here.
 */
public final class ClientBridge {
  private final YarnConfiguration conf;
  private final YarnClient yarn;
  private final FsBridge fs;
  private final Map<String, YarnClientApplication> created = new HashMap<>();
  private boolean resourceTypesLoaded;

  public ClientBridge() {
    this(new String[0], "{}");
  }

  /**
   * confFiles: extra Hadoop configuration files, loaded over HADOOP_CONF_DIR's (TonY's
   * tony.application.hdfs-conf-path / yarn-conf-path / mapred-conf-path); propertiesJson:
   * settings given on the command line (`--conf k=v`, the jar's `-D k=v`), over both.
   */
  public ClientBridge(String[] confFiles, String propertiesJson) {
    conf = new YarnConfiguration();
    for (String file : confFiles) {
      conf.addResource(new org.apache.hadoop.fs.Path(file));
    }
    for (Map.Entry<String, com.google.gson.JsonElement> e : Json.parse(propertiesJson).entrySet()) {
      conf.set(e.getKey(), e.getValue().getAsString(), "command line");
    }
    yarn = YarnClient.createYarnClient();
    yarn.init(conf);
    yarn.start();
    fs = new FsBridge(conf);
  }

  public FsBridge fs() {
    return fs;
  }

  /** The classpath containers get Hadoop from (the cluster's, or YARN's cross-platform default). */
  public String[] applicationClasspath() {
    return conf.getTrimmedStrings(
        YarnConfiguration.YARN_APPLICATION_CLASSPATH,
        YarnConfiguration.DEFAULT_YARN_CROSS_PLATFORM_APPLICATION_CLASSPATH);
  }

  /** The resource types the RM knows, loaded once so GPU requests are understood. */
  private List<String> loadResourceTypes() throws IOException, YarnException {
    List<ResourceTypeInfo> types = yarn.getResourceTypeInfo();
    if (!resourceTypesLoaded) {
      ResourceUtils.reinitializeResources(types);
      resourceTypesLoaded = true;
    }
    List<String> names = new ArrayList<>();
    for (ResourceTypeInfo t : types) {
      names.add(t.getName());
    }
    return names;
  }

  /** Running nodes with their capacity, and the resource types the cluster schedules. */
  public String clusterJson() throws IOException, YarnException {
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("resource_types", loadResourceTypes());
    List<Map<String, Object>> nodes = new ArrayList<>();
    for (NodeReport n : yarn.getNodeReports(NodeState.RUNNING)) {
      Map<String, Object> node = new LinkedHashMap<>();
      node.put("id", n.getNodeId().toString());
      node.put("http_address", n.getHttpAddress());
      node.put("labels", new ArrayList<>(n.getNodeLabels()));
      node.put("capability", resourceMap(n.getCapability()));
      nodes.add(node);
    }
    out.put("nodes", nodes);
    return Json.write(out);
  }

  static Map<String, Long> resourceMap(Resource r) {
    Map<String, Long> m = new LinkedHashMap<>();
    for (ResourceInformation ri : r.getResources()) {
      m.put(ri.getName(), ri.getValue());
    }
    return m;
  }

  /** Whether the cluster authenticates with Kerberos (hadoop.security.authentication). */
  public boolean securityEnabled() {
    return UserGroupInformation.isSecurityEnabled();
  }

  /** Whether the scheduler knows the queue (checked before anything is created). */
  public boolean queueExists(String queue) throws IOException, YarnException {
    return yarn.getQueueInfo(queue) != null;
  }

  /** Reserves an application id. Nothing is visible in YARN until submit(). */
  public String createApplication() throws IOException, YarnException {
    YarnClientApplication app = yarn.createApplication();
    String id = app.getNewApplicationResponse().getApplicationId().toString();
    created.put(id, app);
    return id;
  }

  /**
   * Submits the AM. spec: {name, queue, type, tags, node_label, priority, max_attempts,
   * attempt_failures_validity_ms, keep_containers, memory_mb, vcores, gpus, launch: {..}}.
   */
  public void submit(String appId, String specJson) throws Exception {
    loadResourceTypes();
    JsonObject spec = Json.parse(specJson);
    YarnClientApplication app = created.remove(appId);
    if (app == null) {
      throw new IllegalStateException("unknown application " + appId);
    }
    ApplicationSubmissionContext ctx = app.getApplicationSubmissionContext();
    ctx.setApplicationName(Json.str(spec, "name", "tony-py"));
    ctx.setQueue(Json.str(spec, "queue", "default"));
    ctx.setApplicationType(Json.str(spec, "type", "TONY"));
    String label = Json.str(spec, "node_label", null);
    if (label != null && !label.isEmpty()) {
      ctx.setNodeLabelExpression(label);
    }
    if (spec.has("tags")) {
      java.util.Set<String> tags = new java.util.HashSet<>();
      spec.getAsJsonArray("tags").forEach(t -> tags.add(t.getAsString()));
      ctx.setApplicationTags(tags);
    }
    ctx.setMaxAppAttempts((int) Json.num(spec, "max_attempts", 1));
    long validity = Json.num(spec, "attempt_failures_validity_ms", -1);
    if (validity > 0) {
      ctx.setAttemptFailuresValidityInterval(validity);
    }
    ctx.setKeepContainersAcrossApplicationAttempts(
        spec.has("keep_containers") && spec.get("keep_containers").getAsBoolean());
    ctx.setPriority(Priority.newInstance((int) Json.num(spec, "priority", 0)));
    long lifetime = Json.num(spec, "lifetime_s", 0);
    if (lifetime > 0) {
      // The RM kills the application at submit + lifetime even if no client or AM is left to.
      ctx.setApplicationTimeouts(
          java.util.Collections.singletonMap(
              org.apache.hadoop.yarn.api.records.ApplicationTimeoutType.LIFETIME, lifetime));
    }
    Resource res = Resource.newInstance(Json.num(spec, "memory_mb", 1024), (int) Json.num(spec, "vcores", 1));
    long gpus = Json.num(spec, "gpus", 0);
    if (gpus > 0) {
      res.setResourceValue(ResourceInformation.GPU_URI, gpus);
    }
    ctx.setResource(res);
    boolean security = !spec.has("security") || spec.get("security").getAsBoolean();
    ContainerLaunchContext clc =
        LaunchSpecs.toLaunchContext(
            spec.get("launch").toString(), security ? securityTokens(Json.strings(spec, "other_namenodes")) : null);
    ctx.setAMContainerSpec(clc);
    yarn.submitApplication(ctx);
  }

  /**
   * HDFS delegation tokens for the AM when Kerberos is on (none in simple-auth mode): for the
   * default file system and for each of tony.other.namenodes.
   */
  private ByteBuffer securityTokens(List<String> otherNamenodes) throws IOException {
    if (!UserGroupInformation.isSecurityEnabled()) {
      return null;
    }
    Credentials creds = new Credentials();
    String renewer = conf.get(YarnConfiguration.RM_PRINCIPAL, "yarn");
    org.apache.hadoop.fs.FileSystem.get(conf).addDelegationTokens(renewer, creds);
    for (String uri : otherNamenodes) {
      new org.apache.hadoop.fs.Path(uri).getFileSystem(conf).addDelegationTokens(renewer, creds);
    }
    DataOutputBuffer dob = new DataOutputBuffer();
    creds.writeTokenStorageToStream(dob);
    return ByteBuffer.wrap(dob.getData(), 0, dob.getLength());
  }

  /**
   * Checks a YARN placement constraint expression (tony.*.placement-spec) with YARN's own
   * parser; returns null if it parses, else the parser's message.
   */
  public String placementError(String expression) {
    try {
      org.apache.hadoop.yarn.util.constraint.PlacementConstraintParser.parseExpression(expression);
      return null;
    } catch (Exception e) {
      return String.valueOf(e.getMessage());
    }
  }

  public String report(String appId) throws IOException, YarnException {
    ApplicationReport r = yarn.getApplicationReport(ApplicationId.fromString(appId));
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("id", appId);
    out.put("name", r.getName());
    out.put("state", r.getYarnApplicationState().toString());
    out.put("final_status", r.getFinalApplicationStatus().toString());
    out.put("diagnostics", r.getDiagnostics());
    out.put("tracking_url", r.getTrackingUrl());
    out.put("original_tracking_url", r.getOriginalTrackingUrl());
    out.put("am_host", r.getHost());
    out.put("start_time", r.getStartTime());
    out.put("launch_time", launchTime(r));
    out.put("finish_time", r.getFinishTime());
    out.put("progress", r.getProgress());
    out.put("user", r.getUser());
    out.put("queue", r.getQueue());
    out.put(
        "attempt_id",
        r.getCurrentApplicationAttemptId() == null ? null : r.getCurrentApplicationAttemptId().toString());
    out.put(
        "attempt",
        r.getCurrentApplicationAttemptId() == null ? 0 : r.getCurrentApplicationAttemptId().getAttemptId());
    return Json.write(out);
  }

  private static long launchTime(ApplicationReport r) {
    try {
      // Hadoop 3.3+ (YARN-8013); absent on older clusters.
      return (long) ApplicationReport.class.getMethod("getLaunchTime").invoke(r);
    } catch (ReflectiveOperationException e) {
      return 0;
    }
  }

  /**
   * One file of one container from YARN's aggregated logs (a finished application), written to
   * a local file (bulk bytes never cross Py4J). Returns false if YARN has no such log. The file
   * holds YARN's framing around the content (Container:/LogType:/LogContents: … End of
   * LogType:), which the caller strips.
   */
  public boolean fetchAggregatedLog(String appId, String owner, String containerId, String fileName, String localPath)
      throws IOException {
    org.apache.hadoop.yarn.logaggregation.ContainerLogsRequest request =
        new org.apache.hadoop.yarn.logaggregation.ContainerLogsRequest();
    request.setAppId(ApplicationId.fromString(appId));
    request.setAppOwner(owner);
    request.setContainerId(containerId);
    request.setLogTypes(java.util.Collections.singleton(fileName));
    request.setBytes(Long.MAX_VALUE);
    request.setAppFinished(true);
    org.apache.hadoop.yarn.logaggregation.filecontroller.LogAggregationFileController controller =
        new org.apache.hadoop.yarn.logaggregation.filecontroller.LogAggregationFileControllerFactory(conf)
            .getFileControllerForRead(ApplicationId.fromString(appId), owner);
    try (java.io.OutputStream out = new java.io.FileOutputStream(localPath)) {
      return controller.readAggregatedLogs(request, out);
    }
  }

  public void kill(String appId, String diagnostics) throws IOException, YarnException {
    yarn.killApplication(ApplicationId.fromString(appId), diagnostics);
  }

  public void close() throws IOException {
    yarn.stop();
    org.apache.hadoop.fs.FileSystem.closeAll();
  }
}
