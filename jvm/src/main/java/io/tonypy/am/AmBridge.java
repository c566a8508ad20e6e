package io.tonypy.am;

import com.google.gson.JsonElement;
import io.tonypy.bridge.FsBridge;
import io.tonypy.bridge.Json;
import io.tonypy.bridge.LaunchSpecs;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.io.DataOutputBuffer;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.security.token.Token;
import org.apache.hadoop.yarn.api.ApplicationConstants;
import org.apache.hadoop.yarn.api.protocolrecords.AllocateResponse;
import org.apache.hadoop.yarn.api.protocolrecords.RegisterApplicationMasterResponse;
import org.apache.hadoop.yarn.api.records.ApplicationAttemptId;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.apache.hadoop.yarn.api.records.ContainerStatus;
import org.apache.hadoop.yarn.api.records.ExecutionType;
import org.apache.hadoop.yarn.api.records.ExecutionTypeRequest;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.api.records.NodeReport;
import org.apache.hadoop.yarn.api.records.PreemptionContainer;
import org.apache.hadoop.yarn.api.records.PreemptionMessage;
import org.apache.hadoop.yarn.api.records.Priority;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.ResourceInformation;
import org.apache.hadoop.yarn.api.records.ResourceSizing;
import org.apache.hadoop.yarn.api.records.SchedulingRequest;
import org.apache.hadoop.yarn.api.resource.PlacementConstraint;
import org.apache.hadoop.yarn.api.resource.PlacementConstraints;
import org.apache.hadoop.yarn.api.records.UpdatedContainer;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;
import org.apache.hadoop.yarn.client.api.async.AMRMClientAsync;
import org.apache.hadoop.yarn.client.api.async.NMClientAsync;
import org.apache.hadoop.yarn.client.api.async.impl.NMClientAsyncImpl;
import org.apache.hadoop.yarn.client.api.impl.AMRMClientImpl;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.exceptions.YarnException;
import org.apache.hadoop.yarn.security.AMRMTokenIdentifier;
import org.apache.hadoop.yarn.util.constraint.PlacementConstraintParser;
import org.apache.hadoop.yarn.util.resource.ResourceUtils;

/**
 * The Py4J entry point of the ApplicationMaster. Java owns the RM heartbeat and the NM calls
 * (AMRMClientAsync / NMClientAsync, whose callback handlers Python cannot implement); every
 * RM/NM callback becomes an event in a queue that the Python AM drains with poll(). All job
 * decisions are Python's.
 */
public final class AmBridge {
  /** A tag no container carries: "not on a node with it" places a request anywhere. */
  static final String UNCONSTRAINED_TAG = "tony-py-unconstrained";
  /** The CapacityScheduler's wait between marking a container for preemption and killing it. */
  static final String PREEMPTION_WAIT_KEY = "yarn.resourcemanager.monitor.capacity.preemption.max_wait_before_kill";
  static final long PREEMPTION_WAIT_DEFAULT_MS = 15000;
  private final YarnConfiguration conf = new YarnConfiguration();
  private final LinkedBlockingQueue<Map<String, Object>> events = new LinkedBlockingQueue<>();
  private final Map<String, Container> containers = new ConcurrentHashMap<>();
  private final FsBridge fs = new FsBridge(conf);
  private final ApplicationAttemptId attemptId;
  private AMRMClientAsync<ContainerRequest> amrm;
  private NMClientAsync nm;
  private volatile ByteBuffer taskTokens;
  private String secretAlias;
  private String appSecret;
  private TokenRenewal renewal;
  private volatile float progress;
  private volatile boolean unregistered;
  /** When the RM last answered this attempt (System.nanoTime): its lease on the application. */
  private volatile long rmAnsweredNanos = System.nanoTime();
  private volatile int heartbeatMs = 1000;
  /** The shortest silence of the RM that is told as an outage (rm_back). */
  static final long RM_OUTAGE_MIN_MS = 3000;

  public AmBridge() throws IOException {
    String cid = System.getenv(ApplicationConstants.Environment.CONTAINER_ID.name());
    if (cid == null) {
      throw new IllegalStateException("CONTAINER_ID is not set: not running in a YARN container");
    }
    attemptId = ContainerId.fromString(cid).getApplicationAttemptId();
    TokenRenewal.loginFromKeytab();  // before the first HDFS or RM call of this attempt
  }

  public String applicationId() {
    return attemptId.getApplicationId().toString();
  }

  public int attemptNumber() {
    return attemptId.getAttemptId();
  }

  public FsBridge fs() {
    return fs;
  }

  /**
   * Hadoop settings TonY-py prefers where no site file sets them (a JSON object; the client
   * JVM gets the same: tony_py/bridge/jvm.py says which and why). Before the first file system
   * use: the HDFS client reads them when it is created.
   */
  public void defaultsUnlessConfigured(String json) {
    org.apache.hadoop.conf.Configuration.addDefaultResource("hdfs-default.xml");
    org.apache.hadoop.conf.Configuration.addDefaultResource("hdfs-site.xml");
    for (Map.Entry<String, JsonElement> e : Json.parse(json).entrySet()) {
      String[] sources = conf.getPropertySources(e.getKey());
      boolean configured =
          sources != null && Arrays.stream(sources).anyMatch(s -> !s.endsWith("-default.xml"));
      if (!configured) {
        conf.set(e.getKey(), e.getValue().getAsString(), "tony-py default");
      }
    }
  }

  /**
   * host:port of YARN's web proxy (or of each RM's web app when no separate proxy runs): the
   * addresses Hadoop's AmIpFilter trusts to relay authenticated users to the tracking URL.
   */
  public String[] proxyHosts() {
    return org.apache.hadoop.yarn.webapp.util.WebAppUtils.getProxyHostsAndPortsForAmFilter(conf)
        .toArray(new String[0]);
  }

  /**
   * secretAlias/appSecret: the application secret, put into each task container's credentials
   * under that alias. The NodeManager writes them to the container's token file
   * (HADOOP_TOKEN_FILE_LOCATION, readable by the job's user only) when it launches the
   * container: no localization, nothing in the launch script or its logged copy.
   * tony_py/appsecret.py names the alias and reads it back.
   */
  public void start(int heartbeatMs, String secretAlias, String appSecret) throws IOException {
    this.secretAlias = secretAlias;
    this.appSecret = appSecret;
    taskTokens = taskTokens(secretAlias, appSecret);
    this.heartbeatMs = heartbeatMs;
    rideThroughRmOutages();
    amrm = AMRMClientAsync.createAMRMClientAsync(new RmLeaseClient(), heartbeatMs, new RmHandler());
    amrm.init(conf);
    amrm.start();
    nm = new GangStarts(new NmHandler());
    nm.init(conf);
    nm.start();
    // Containers must survive an AM attempt that dies (they are re-adopted by the next one);
    // Python stops what it wants stopped.
    nm.getClient().cleanupRunningContainersOnStop(false);
  }

  /**
   * With the submitter's keytab (TokenRenewal): log in for new delegation tokens for the default
   * FS and those of fileSystemsJson ({"file_systems": [paths or URIs]}), which renewTokensNow
   * gets, for this process and every container started afterwards; when, Python decides
   * (tony_py/am/tokens.py) from heldTokens and tokenRenewalIntervalMs. With renewFirst (an AM
   * attempt after the first) a new set is in place when this returns. Returns false without a
   * keytab.
   */
  public boolean startTokenRenewal(String fileSystemsJson, boolean renewFirst)
      throws IOException, InterruptedException {
    if (TokenRenewal.keytabPrincipal() == null) {
      return false;
    }
    List<String> fileSystems = Json.strings(Json.parse(fileSystemsJson), "file_systems");
    renewal =
        new TokenRenewal(
            conf,
            fileSystems,
            () -> {
              try {
                taskTokens = taskTokens(secretAlias, appSecret);
              } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
              }
            });
    renewal.start(renewFirst);
    return true;
  }

  /**
   * A fresh key and self-signed certificate for the AM's TLS listener (AmTls), written into dir;
   * {"cert": path, "key": path, "sha256": hex digest of the certificate}.
   */
  public String tlsMaterial(String dir) throws Exception {
    return Json.write(AmTls.generate(new java.io.File(dir)));
  }

  /** How many times the tokens were renewed (0: never, or no keytab). */
  public int tokensVersion() {
    return renewal == null ? 0 : renewal.version();
  }

  /** What a task container's token file holds now, base64 (for running executors, over TLS). */
  public String taskTokensBase64() {
    ByteBuffer b = taskTokens.duplicate();
    byte[] bytes = new byte[b.remaining()];
    b.get(bytes);
    return java.util.Base64.getEncoder().encodeToString(bytes);
  }

  /**
   * The NameNode's delegation token renewal interval (ms): asked of it with probe (a token
   * renewed once, then cancelled; the configured one where that fails), else as this process's
   * configuration says (a day by default). 0 without a keytab.
   */
  public long tokenRenewalIntervalMs(boolean probe) {
    if (renewal == null) {
      return 0;
    }
    return probe ? renewal.probeIntervalMs() : renewal.configuredIntervalMs();
  }

  /**
   * JSON [{"kind", "service", "issued_ms", "max_ms"}]: the delegation tokens a new set replaces,
   * as the AM holds them now (the submission's, then the last set's); [] without a keytab.
   */
  public String heldTokens() throws IOException, InterruptedException {
    return Json.write(renewal == null ? java.util.Collections.emptyList() : renewal.heldTokens());
  }

  /** A new set of delegation tokens now; whether it is in place (false without a keytab). */
  public boolean renewTokensNow() {
    return renewal != null && renewal.renewNow();
  }

  /** Why the last try for new tokens or the interval failed (null: it did not). */
  public String tokenRenewalError() {
    return renewal == null ? null : renewal.lastError();
  }

  /** Secret keys of the AM's credentials that carry its job files (tony_py/appsecret.py). */
  static final String AM_FILE_ALIAS_PREFIX = "tony-py.file.";

  /**
   * The AM's credentials minus the AMRM token and the AM's job files, plus the app secret: what
   * task containers hold.
   */
  private static ByteBuffer taskTokens(String secretAlias, String appSecret) throws IOException {
    Credentials creds = UserGroupInformation.getCurrentUser().getCredentials();
    Credentials copy = new Credentials(creds);
    // getAllTokens() is a live view of the token map (the distributed-shell AM relies on it).
    Iterator<Token<?>> it = copy.getAllTokens().iterator();
    while (it.hasNext()) {
      if (AMRMTokenIdentifier.KIND_NAME.equals(it.next().getKind())) {
        it.remove();
      }
    }
    for (Text alias : new ArrayList<>(copy.getAllSecretKeys())) {
      if (alias.toString().startsWith(AM_FILE_ALIAS_PREFIX)) {  // the AM's own job files
        copy.removeSecretKey(alias);
      }
    }
    copy.addSecretKey(new Text(secretAlias), appSecret.getBytes(StandardCharsets.UTF_8));
    DataOutputBuffer dob = new DataOutputBuffer();
    copy.writeTokenStorageToStream(dob);  // Hadoop's WRITABLE format, what NodeManagers write back
    return ByteBuffer.wrap(dob.getData(), 0, dob.getLength());
  }

  /**
   * Registers with the RM; returns capacity, resource types and containers kept from earlier
   * attempts. placementSpec: an application-wide placement constraint expression, or null.
   */
  public String register(String host, int port, String trackingUrl, String placementSpec) throws Exception {
    RegisterApplicationMasterResponse r;
    if (placementSpec == null || placementSpec.isEmpty()) {
      r = amrm.registerApplicationMaster(host, port, trackingUrl);
    } else {
      Map<java.util.Set<String>, PlacementConstraint> constraints = new java.util.HashMap<>();
      constraints.put(java.util.Collections.singleton(""), PlacementConstraintParser.parseExpression(placementSpec).build());
      r = amrm.registerApplicationMaster(host, port, trackingUrl, constraints);
    }
    rmAnsweredNanos = System.nanoTime();
    ResourceUtils.reinitializeResources(r.getResourceTypes());
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("max_capability", resourceMap(r.getMaximumResourceCapability()));
    out.put("queue", r.getQueue());
    List<Map<String, Object>> previous = new ArrayList<>();
    for (Container c : r.getContainersFromPreviousAttempts()) {
      containers.put(c.getId().toString(), c);
      previous.add(describe(c));
    }
    out.put("previous_containers", previous);
    return Json.write(out);
  }

  /** Asks for `count` containers of one job type; allocationRequestId ties them to it. */
  public void request(
      long allocationRequestId, int priority, long memoryMb, int vcores, long gpus, String nodeLabel, int count) {
    Resource res = Resource.newInstance(memoryMb, vcores);
    if (gpus > 0) {
      res.setResourceValue(ResourceInformation.GPU_URI, gpus);
    }
    for (int i = 0; i < count; i++) {
      ContainerRequest.ContainerRequestBuilder b =
          ContainerRequest.newBuilder()
              .capability(res)
              .priority(Priority.newInstance(priority))
              .allocationRequestId(allocationRequestId)
              .relaxLocality(true);
      if (nodeLabel != null && !nodeLabel.isEmpty()) {
        b.nodeLabelsExpression(nodeLabel);
      }
      amrm.addContainerRequest(b.build());
    }
  }

  /**
   * Asks for `count` containers of one job type as a SchedulingRequest with a placement
   * constraint (tony.<type>.placement-spec) and allocation tags; allocationRequestId ties them
   * to the type as for plain requests. A null expression is a type without a constraint in a
   * job whose other types have one: YARN's CapacityScheduler ignores the SchedulingRequests of
   * an allocate call that also carries ResourceRequests, so such a job asks for every type this
   * way, the unconstrained ones with an anti-affinity to a tag no container carries (the only
   * constraint form the scheduler's placement handler accepts).
   */
  public void requestPlaced(long allocationRequestId, int priority, long memoryMb, int vcores, long gpus,
      java.util.List<String> tags, String expression, int count) throws Exception {
    Resource res = Resource.newInstance(memoryMb, vcores);
    if (gpus > 0) {
      res.setResourceValue(ResourceInformation.GPU_URI, gpus);
    }
    SchedulingRequest request =
        SchedulingRequest.newBuilder()
            .allocationRequestId(allocationRequestId)
            .priority(Priority.newInstance(priority))
            .executionType(ExecutionTypeRequest.newInstance(ExecutionType.GUARANTEED))
            .allocationTags(new java.util.HashSet<>(tags))
            .resourceSizing(ResourceSizing.newInstance(count, res))
            .placementConstraintExpression(expression == null || expression.isEmpty()
                ? PlacementConstraints.build(PlacementConstraints.targetNotIn(PlacementConstraints.NODE,
                    PlacementConstraints.PlacementTargets.allocationTag(UNCONSTRAINED_TAG)))
                : PlacementConstraintParser.parseExpression(expression).build())
            .build();
    amrm.addSchedulingRequests(java.util.Collections.singletonList(request));
  }

  /** Withdraws every outstanding request of a job type; returns how many were withdrawn. */
  public synchronized int cancelRequests(long allocationRequestId) {
    Collection<ContainerRequest> pending = new ArrayList<>(amrm.getMatchingRequests(allocationRequestId));
    for (ContainerRequest r : pending) {
      amrm.removeContainerRequest(r);
    }
    return pending.size();
  }

  public void launch(String containerId, String specJson) throws Exception {
    Container c = containers.get(containerId);
    if (c == null) {
      throw new IllegalArgumentException("unknown container " + containerId);
    }
    nm.startContainerAsync(c, LaunchSpecs.toLaunchContext(specJson, taskTokens.duplicate()));
  }

  public void stop(String containerId) {
    Container c = containers.get(containerId);
    if (c != null) {
      nm.stopContainerAsync(c.getId(), c.getNodeId());
    }
  }

  /** Gives an allocated (unused or finished) container back to YARN. */
  public void release(String containerId) {
    Container c = containers.remove(containerId);
    if (c != null) {
      amrm.releaseAssignedContainer(c.getId());
    }
  }

  /** Lists, not arrays: Py4J hands Python lists over as java.util.List. */
  public void updateBlacklist(java.util.List<String> add, java.util.List<String> remove) {
    amrm.updateBlacklist(add, remove);
  }

  /** How many NodeManagers the RM reported in its last allocate response. */
  public int clusterNodeCount() {
    return amrm.getClusterNodeCount();
  }

  public void setProgress(float p) {
    progress = p;
  }

  public void setHeartbeatInterval(int ms) {
    heartbeatMs = ms;
    amrm.setHeartbeatInterval(ms);
  }

  /** Waits up to timeoutMs for the first event, then returns all queued events as JSON. */
  public String poll(long timeoutMs) throws InterruptedException {
    List<Map<String, Object>> batch = new ArrayList<>();
    Map<String, Object> first = events.poll(timeoutMs, TimeUnit.MILLISECONDS);
    if (first != null) {
      batch.add(first);
      events.drainTo(batch);
    }
    return Json.write(batch);
  }

  public void unregister(String finalStatus, String diagnostics, String trackingUrl) throws Exception {
    amrm.unregisterApplicationMaster(FinalApplicationStatus.valueOf(finalStatus), diagnostics, trackingUrl);
    unregistered = true;
  }

  public boolean isUnregistered() {
    return unregistered;
  }

  void shutdown() {
    if (nm != null) {
      nm.stop();
    }
    if (amrm != null) {
      amrm.stop();
    }
  }

  // ---- events ----------------------------------------------------------------------------

  private void emit(String type, Map<String, Object> body) {
    body.put("type", type);
    body.put("time_ms", System.currentTimeMillis());
    events.add(body);
  }

  private static Map<String, Object> describe(Container c) {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("id", c.getId().toString());
    m.put("node_id", c.getNodeId().toString());
    m.put("host", c.getNodeId().getHost());
    m.put("node_http", c.getNodeHttpAddress());
    m.put("resource", resourceMap(c.getResource()));
    m.put("allocation_request_id", c.getAllocationRequestId());
    m.put("priority", c.getPriority() == null ? -1 : c.getPriority().getPriority());
    return m;
  }

  static Map<String, Long> resourceMap(Resource r) {
    Map<String, Long> m = new LinkedHashMap<>();
    for (ResourceInformation ri : r.getResources()) {
      m.put(ri.getName(), ri.getValue());
    }
    return m;
  }

  /** Whether the cluster enforces application ACLs (yarn.acl.enable): who may see a job. */
  public boolean aclsEnabled() {
    return conf.getBoolean(YarnConfiguration.YARN_ACL_ENABLE, YarnConfiguration.DEFAULT_YARN_ACL_ENABLE);
  }

  /** Milliseconds since the RM last answered this attempt's heartbeat. */
  public long rmSilentMs() {
    return TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - rmAnsweredNanos);
  }

  /** How long the RM lets an AM attempt be silent before it ends it and starts the next one. */
  public long amExpiryMs() {
    return conf.getLong(YarnConfiguration.RM_AM_EXPIRY_INTERVAL_MS, YarnConfiguration.DEFAULT_RM_AM_EXPIRY_INTERVAL_MS);
  }

  /**
   * An RM restart or fail-over must not end this attempt: the RM recovers it and AMRMClient
   * re-registers by itself. AMRMClientAsync gives up (onError, then no more heartbeats) once its
   * RM proxy stops retrying, after yarn.resourcemanager.connect.max-wait.ms, which clusters
   * often set short for their clients; the AM retries at least as long as the RM itself would
   * keep the attempt (its AM expiry): past that, the RM has ended it anyway.
   */
  private void rideThroughRmOutages() {
    long expiry = amExpiryMs();
    if (conf.getLong(YarnConfiguration.RESOURCEMANAGER_CONNECT_MAX_WAIT_MS,
            YarnConfiguration.DEFAULT_RESOURCEMANAGER_CONNECT_MAX_WAIT_MS) < expiry) {
      conf.setLong(YarnConfiguration.RESOURCEMANAGER_CONNECT_MAX_WAIT_MS, expiry);
      // An HA pair's proxy counts fail-overs instead: derived from the wait unless a cluster set
      // its own number, which would cut the wait short again.
      conf.unset(YarnConfiguration.CLIENT_FAILOVER_MAX_ATTEMPTS);
    }
  }

  /**
   * AMRMClient that notes every allocate call the RM answered (AMRMClientAsync's heartbeat), and
   * an answer after a silence of several heartbeats: an RM outage this attempt rode through (a
   * restart or fail-over, when AMRMClient re-registered on the way), with its length.
   */
  private final class RmLeaseClient extends AMRMClientImpl<ContainerRequest> {
    @Override
    public AllocateResponse allocate(float progressIndicator) throws YarnException, IOException {
      AllocateResponse response = super.allocate(progressIndicator);
      long now = System.nanoTime();
      long silentMs = TimeUnit.NANOSECONDS.toMillis(now - rmAnsweredNanos);
      rmAnsweredNanos = now;
      if (silentMs > Math.max(RM_OUTAGE_MIN_MS, 5L * heartbeatMs)) {
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("silent_ms", silentMs);
        emit("rm_back", body);
      }
      return response;
    }
  }

  private final class RmHandler extends AMRMClientAsync.AbstractCallbackHandler {
    /** Containers of earlier attempts the RM names only now (they were not recovered yet at registration). */
    @Override
    public void onContainersReceivedFromPreviousAttempts(List<Container> previous) {
      List<Map<String, Object>> described = new ArrayList<>();
      for (Container c : previous) {
        containers.put(c.getId().toString(), c);
        described.add(describe(c));
      }
      Map<String, Object> body = new LinkedHashMap<>();
      body.put("containers", described);
      emit("previous_containers", body);
    }

    @Override
    public void onContainersAllocated(List<Container> allocated) {
      for (Container c : allocated) {
        containers.put(c.getId().toString(), c);
        // Remove the satisfied request at once, or AMRMClient asks for it again (YARN-1902).
        synchronized (AmBridge.this) {
          Collection<ContainerRequest> matching = amrm.getMatchingRequests(c.getAllocationRequestId());
          Iterator<ContainerRequest> it = matching.iterator();
          if (it.hasNext()) {
            amrm.removeContainerRequest(it.next());
          }
        }
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("container", describe(c));
        emit("allocated", body);
      }
    }

    @Override
    public void onContainersCompleted(List<ContainerStatus> statuses) {
      for (ContainerStatus s : statuses) {
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("container_id", s.getContainerId().toString());
        body.put("exit_status", s.getExitStatus());
        body.put("state", s.getState().toString());
        body.put("diagnostics", s.getDiagnostics());
        emit("completed", body);
      }
    }

    @Override
    public void onContainersUpdated(List<UpdatedContainer> updated) {}

    /**
     * The scheduler will take these containers back (another queue needs its share): strict
     * ones for sure, negotiable ones unless the AM gives back the same resources itself, which
     * a gang cannot. Both are told to Python, with how long the RM waits before the kill as
     * the cluster configures it (the message itself carries no deadline).
     */
    @Override
    public void onPreemptionMessageReceived(PreemptionMessage message) {
      List<String> ids = new ArrayList<>();
      if (message.getStrictContract() != null) {
        for (PreemptionContainer c : message.getStrictContract().getContainers()) {
          ids.add(c.getId().toString());
        }
      }
      if (message.getContract() != null) {
        for (PreemptionContainer c : message.getContract().getContainers()) {
          ids.add(c.getId().toString());
        }
      }
      if (ids.isEmpty()) {
        return;
      }
      Map<String, Object> body = new LinkedHashMap<>();
      body.put("containers", ids);
      body.put("wait_ms", conf.getLong(PREEMPTION_WAIT_KEY, PREEMPTION_WAIT_DEFAULT_MS));
      emit("preemption", body);
    }

    @Override
    public void onShutdownRequest() {
      emit("shutdown_request", new LinkedHashMap<>());
    }

    @Override
    public void onNodesUpdated(List<NodeReport> nodes) {
      List<Map<String, Object>> list = new ArrayList<>();
      for (NodeReport n : nodes) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("node_id", n.getNodeId().toString());
        m.put("state", n.getNodeState().toString());
        list.add(m);
      }
      Map<String, Object> body = new LinkedHashMap<>();
      body.put("nodes", list);
      emit("nodes_updated", body);
    }

    @Override
    public float getProgress() {
      return progress;
    }

    @Override
    public void onRequestsRejected(List<org.apache.hadoop.yarn.api.records.RejectedSchedulingRequest> rejected) {
      for (org.apache.hadoop.yarn.api.records.RejectedSchedulingRequest r : rejected) {
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("allocation_request_id", r.getRequest().getAllocationRequestId());
        body.put("reason", String.valueOf(r.getReason()));
        emit("requests_rejected", body);
      }
    }

    @Override
    public void onError(Throwable e) {
      Map<String, Object> body = new LinkedHashMap<>();
      body.put("message", String.valueOf(e));
      emit("rm_error", body);
    }
  }

  private void emitContainer(String type, ContainerId id, Throwable error) {
    Map<String, Object> body = new LinkedHashMap<>();
    body.put("container_id", id.toString());
    if (error != null) {
      body.put("message", String.valueOf(error));
    }
    emit(type, body);
  }

  /**
   * Hadoop's NodeManager client starts 10 threads and widens its pool only with the number of
   * NodeManagers it talks to; each start holds a thread for its whole RPC (a connection and its
   * SASL handshake, then the NodeManager's answer). A 16-container gang on 2 nodes started 10
   * containers, then the rest one by one as those calls returned, the last ~0.5 s late: the gang
   * waits for its last member. A gang's starts come in one burst, so the pool starts wider.
   */
  private static final class GangStarts extends NMClientAsyncImpl {
    private static final int START_THREADS = 32;

    GangStarts(NMClientAsync.AbstractCallbackHandler handler) {
      super(handler);
    }

    @Override
    protected void serviceStart() throws Exception {
      super.serviceStart();
      threadPool.setCorePoolSize(Math.max(threadPool.getCorePoolSize(), Math.min(maxThreadPoolSize, START_THREADS)));
    }
  }

  private final class NmHandler extends NMClientAsync.AbstractCallbackHandler {
    @Override
    public void onContainerStarted(ContainerId id, Map<String, ByteBuffer> allServiceResponse) {
      emitContainer("started", id, null);
    }

    @Override
    public void onStartContainerError(ContainerId id, Throwable t) {
      emitContainer("start_failed", id, t);
    }

    @Override
    public void onContainerStopped(ContainerId id) {
      emitContainer("stopped", id, null);
    }

    @Override
    public void onStopContainerError(ContainerId id, Throwable t) {
      emitContainer("stop_failed", id, t);
    }

    @Override
    public void onContainerStatusReceived(ContainerId id, ContainerStatus status) {}

    @Override
    public void onGetContainerStatusError(ContainerId id, Throwable t) {}

    @Override
    @SuppressWarnings("deprecation")
    public void onContainerResourceIncreased(ContainerId id, Resource r) {}

    @Override
    public void onContainerResourceUpdated(ContainerId id, Resource r) {}

    @Override
    @SuppressWarnings("deprecation")
    public void onIncreaseContainerResourceError(ContainerId id, Throwable t) {}

    @Override
    public void onUpdateContainerResourceError(ContainerId id, Throwable t) {}
  }
}
