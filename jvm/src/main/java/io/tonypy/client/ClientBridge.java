package io.tonypy.client;

import io.tonypy.bridge.FsBridge;
import io.tonypy.bridge.Json;
import io.tonypy.bridge.LaunchSpecs;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import java.io.IOException;
import java.net.InetSocketAddress;
import javax.security.auth.kerberos.KerberosTicket;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.io.DataOutputBuffer;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.token.Token;
import org.apache.hadoop.security.token.TokenIdentifier;
import org.apache.hadoop.yarn.security.client.RMDelegationTokenIdentifier;
import org.apache.hadoop.yarn.util.ConverterUtils;
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
  private long tokensEndMs;

  public ClientBridge() throws IOException {
    this(new String[0], "{}", null, null);
  }

  /**
   * confFiles: extra Hadoop configuration files, loaded over HADOOP_CONF_DIR's (TonY's
   * tony.application.hdfs-conf-path / yarn-conf-path / mapred-conf-path); propertiesJson:
   * settings given on the command line (`--conf k=v`, the jar's `-D k=v`), over both.
   * principal/keytab (both or neither): on a Kerberos cluster, log in from the keytab instead of
   * using the ticket cache or a scheduler's token file (HADOOP_TOKEN_FILE_LOCATION).
   */
  public ClientBridge(String[] confFiles, String propertiesJson, String principal, String keytab)
      throws IOException {
    conf = new YarnConfiguration();
    for (String file : confFiles) {
      conf.addResource(new org.apache.hadoop.fs.Path(file));
    }
    for (Map.Entry<String, com.google.gson.JsonElement> e : Json.parse(propertiesJson).entrySet()) {
      conf.set(e.getKey(), e.getValue().getAsString(), "command line");
    }
    // Before any client exists: they capture the current user when they are created.
    UserGroupInformation.setConfiguration(conf);
    if (principal != null && !principal.isEmpty()) {
      UserGroupInformation.loginUserFromKeytab(principal, keytab);
    } else {
      adoptTokenOwner();
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
    // Two ResourceManagers: one that has just taken over counts only the NodeManagers that have
    // registered with it again (submission.py reads the nodes again before refusing a job).
    out.put("ha", org.apache.hadoop.yarn.conf.HAUtil.isHAEnabled(conf));
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

  /**
   * Who this client is to a secure cluster, for the client to judge before it asks the cluster
   * anything: {secure, user (short name), principal, keytab, tgt_end_ms (0: no ticket), tokens
   * (kinds), token_file}. No secret leaves the JVM.
   */
  public String credentialsJson() throws IOException {
    Map<String, Object> out = new LinkedHashMap<>();
    boolean secure = UserGroupInformation.isSecurityEnabled();
    out.put("secure", secure);
    if (!secure) {
      return Json.write(out);
    }
    UserGroupInformation ugi = UserGroupInformation.getCurrentUser();
    out.put("user", ugi.getShortUserName());
    out.put("principal", ugi.getUserName());
    out.put("keytab", ugi.isFromKeytab());
    out.put("tgt_end_ms", tgtEnd(ugi));
    List<String> kinds = new ArrayList<>();
    for (Token<?> t : ugi.getCredentials().getAllTokens()) {
      kinds.add(t.getKind().toString());
    }
    out.put("tokens", kinds);
    out.put("token_file", System.getenv(UserGroupInformation.HADOOP_TOKEN_FILE_LOCATION));
    return Json.write(out);
  }

  /**
   * A scheduler's token file and no ticket (Azkaban, Oozie): act as the tokens' owner, whom HDFS
   * and YARN see anyway, so that home and staging dirs are that user's and not the OS account's
   * (the scheduler's service account, or a container's user).
   */
  private static void adoptTokenOwner() throws IOException {
    if (!UserGroupInformation.isSecurityEnabled()) {
      return;
    }
    UserGroupInformation login = UserGroupInformation.getLoginUser();
    if (tgtEnd(login) > 0) {
      return;
    }
    for (Token<?> t : login.getCredentials().getAllTokens()) {
      if (!"HDFS_DELEGATION_TOKEN".equals(t.getKind().toString())) {
        continue;
      }
      TokenIdentifier id = t.decodeIdentifier();
      String owner = id == null || id.getUser() == null ? null : id.getUser().getShortUserName();
      if (owner != null && !owner.equals(login.getShortUserName())) {
        UserGroupInformation user = UserGroupInformation.createRemoteUser(owner);
        user.addCredentials(login.getCredentials());
        UserGroupInformation.setLoginUser(user);
      }
      return;
    }
  }

  /**
   * What a scheduler hands the jobs it launches: this user's delegation tokens for the default
   * file system and the ResourceManager, written to path in Hadoop's token storage format (for
   * HADOOP_TOKEN_FILE_LOCATION), mode 0600.
   */
  public void writeTokenFile(String path) throws IOException, YarnException {
    ByteBuffer tokens = withSecretKeys(securityTokens(new ArrayList<>()), null);
    if (tokens == null) {
      throw new IOException("this cluster does not use Kerberos: there are no delegation tokens to write");
    }
    java.nio.file.Path file = java.nio.file.Paths.get(path);
    java.nio.file.Files.deleteIfExists(file);
    java.nio.file.Files.createFile(
        file,
        java.nio.file.attribute.PosixFilePermissions.asFileAttribute(
            java.nio.file.attribute.PosixFilePermissions.fromString("rw-------")));
    java.nio.file.Files.write(file, java.util.Arrays.copyOfRange(tokens.array(), tokens.position(), tokens.limit()));
  }

  /** When the user's ticket-granting ticket ends (ms since the epoch), 0 if there is none. */
  private static long tgtEnd(UserGroupInformation ugi) {
    javax.security.auth.Subject subject =
        ugi.doAs(
            (java.security.PrivilegedAction<javax.security.auth.Subject>)
                () -> javax.security.auth.Subject.getSubject(java.security.AccessController.getContext()));
    if (subject == null) {
      return 0;
    }
    long end = 0;
    for (KerberosTicket t : subject.getPrivateCredentials(KerberosTicket.class)) {
      if (t.getServer().getName().startsWith("krbtgt/") && t.getEndTime() != null) {
        end = Math.max(end, t.getEndTime().getTime());
      }
    }
    return end;
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
    Credentials creds = security ? securityTokens(Json.strings(spec, "token_file_systems")) : null;
    ByteBuffer tokens = withSecretKeys(creds, spec.getAsJsonObject("secret_keys"));
    // Tokens the user already held (a scheduler's token file) are theirs to use again after this
    // job: the ResourceManager must not cancel them when the application ends.
    ctx.setCancelTokensWhenComplete(!holdsTokens());
    ContainerLaunchContext clc = LaunchSpecs.toLaunchContext(spec.get("launch").toString(), tokens);
    ctx.setAMContainerSpec(clc);
    yarn.submitApplication(ctx);
  }

  /**
   * The AM's credentials (null: none) with secretKeys ({alias: base64}) added: the app secret and
   * the AM's own job files, which the NodeManager then writes to the AM container's token file
   * (the job user's only) without a localizer (tony_py/appsecret.py).
   */
  private static ByteBuffer withSecretKeys(Credentials creds, JsonObject secretKeys) throws IOException {
    if (secretKeys != null && secretKeys.size() > 0) {
      creds = creds == null ? new Credentials() : creds;
      for (Map.Entry<String, JsonElement> e : secretKeys.entrySet()) {
        creds.addSecretKey(new Text(e.getKey()), java.util.Base64.getDecoder().decode(e.getValue().getAsString()));
      }
    }
    if (creds == null) {
      return null;
    }
    DataOutputBuffer dob = new DataOutputBuffer();
    creds.writeTokenStorageToStream(dob);
    return ByteBuffer.wrap(dob.getData(), 0, dob.getLength());
  }

  /**
   * The AM's credentials on a Kerberos cluster (none in simple-auth mode): the user's own tokens
   * (a scheduler's token file among them) plus whatever is missing of an HDFS delegation token for
   * each of fileSystems (the default FS, staging, history, tony.other.namenodes, a remote venv or
   * src_dir) and a ResourceManager delegation token, all renewable by the ResourceManager (which
   * renews them while the application runs). A file system whose token the user already holds
   * is not asked again, so a token-file-only client (Azkaban, Oozie) submits without a ticket.
   */
  private Credentials securityTokens(List<String> fileSystems) throws IOException, YarnException {
    if (!UserGroupInformation.isSecurityEnabled()) {
      return null;
    }
    Credentials creds = new Credentials(UserGroupInformation.getCurrentUser().getCredentials());
    String renewer = io.tonypy.bridge.Renewer.rmPrincipal(conf);
    org.apache.hadoop.fs.FileSystem.get(conf).addDelegationTokens(renewer, creds);
    for (String uri : fileSystems) {
      try {
        new org.apache.hadoop.fs.Path(uri).getFileSystem(conf).addDelegationTokens(renewer, creds);
      } catch (IOException e) {
        throw new IOException("cannot get a delegation token for " + uri + ": " + e.getMessage(), e);
      }
    }
    io.tonypy.bridge.TokenAliases.addHostAliases(creds, conf, fileSystems);  // for tasks' hdfs-native
    if (!hasToken(creds, RMDelegationTokenIdentifier.KIND_NAME)) {
      InetSocketAddress rm =
          conf.getSocketAddr(
              YarnConfiguration.RM_ADDRESS,
              YarnConfiguration.DEFAULT_RM_ADDRESS,
              YarnConfiguration.DEFAULT_RM_PORT);
      Token<TokenIdentifier> token =
          ConverterUtils.convertFromYarn(yarn.getRMDelegationToken(new Text(renewer)), rm);
      creds.addToken(token.getService(), token);
    }
    tokensEndMs = Long.MAX_VALUE;
    for (Token<?> t : creds.getAllTokens()) {
      TokenIdentifier id = t.decodeIdentifier();
      if (id instanceof org.apache.hadoop.security.token.delegation.AbstractDelegationTokenIdentifier) {
        long max = ((org.apache.hadoop.security.token.delegation.AbstractDelegationTokenIdentifier) id).getMaxDate();
        tokensEndMs = Math.min(tokensEndMs, max);
      }
    }
    return creds;
  }

  /**
   * When the first of the last submitted application's delegation tokens reaches its max
   * lifetime (ms since the epoch; 0 on a cluster without Kerberos).
   */
  public long tokensEndMs() {
    return tokensEndMs == Long.MAX_VALUE ? 0 : tokensEndMs;
  }

  private static boolean holdsTokens() throws IOException {
    return UserGroupInformation.isSecurityEnabled()
        && !UserGroupInformation.getCurrentUser().getCredentials().getAllTokens().isEmpty();
  }

  private static boolean hasToken(Credentials creds, Text kind) {
    for (Token<?> t : creds.getAllTokens()) {
      if (kind.equals(t.getKind())) {
        return true;
      }
    }
    return false;
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
    out.put("log_aggregation", r.getLogAggregationStatus() == null ? null : r.getLogAggregationStatus().toString());
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

  /**
   * The names of the per-node files in the application's aggregated-log dir, as a JSON list; null
   * if it has no such dir. An empty dir once the RM reports aggregation SUCCEEDED: every node
   * uploaded nothing, because its NodeManager could open none of the logs (under Kerberos,
   * SecureIOUtils' owner check: a node then deletes its temporary file instead of keeping it).
   */
  public String aggregatedLogNodes(String appId, String owner) throws IOException {
    ApplicationId id = ApplicationId.fromString(appId);
    for (org.apache.hadoop.yarn.logaggregation.filecontroller.LogAggregationFileController controller :
        new org.apache.hadoop.yarn.logaggregation.filecontroller.LogAggregationFileControllerFactory(conf)
            .getConfiguredLogAggregationFileControllerList()) {
      org.apache.hadoop.fs.Path dir = controller.getRemoteAppLogDir(id, owner);
      org.apache.hadoop.fs.FileSystem fs = dir.getFileSystem(conf);
      if (fs.exists(dir)) {
        List<String> names = new ArrayList<>();
        for (org.apache.hadoop.fs.FileStatus status : fs.listStatus(dir)) {
          names.add(status.getPath().getName());
        }
        return Json.write(names);
      }
    }
    return null;
  }

  public void kill(String appId, String diagnostics) throws IOException, YarnException {
    yarn.killApplication(ApplicationId.fromString(appId), diagnostics);
  }

  public void close() throws IOException {
    yarn.stop();
    org.apache.hadoop.fs.FileSystem.closeAll();
  }
}
