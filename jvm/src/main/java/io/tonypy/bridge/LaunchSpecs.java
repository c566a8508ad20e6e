package io.tonypy.bridge;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import java.net.URISyntaxException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.LocalResource;
import org.apache.hadoop.yarn.api.records.LocalResourceType;
import org.apache.hadoop.yarn.api.records.LocalResourceVisibility;
import org.apache.hadoop.yarn.api.records.URL;

/**
 * Builds a ContainerLaunchContext from the JSON launch spec Python writes:
 * {"resources": {name: {path, size, mtime, type, visibility}}, "env": {..}, "commands": [..]}.
 * Used for the AM container (client side) and for task containers (AM side).
 */
public final class LaunchSpecs {
  private LaunchSpecs() {}

  public static ContainerLaunchContext toLaunchContext(String specJson, ByteBuffer tokens)
      throws URISyntaxException {
    JsonObject spec = Json.parse(specJson);
    Map<String, LocalResource> resources = new HashMap<>();
    if (spec.has("resources")) {
      for (Map.Entry<String, JsonElement> e : spec.getAsJsonObject("resources").entrySet()) {
        resources.put(e.getKey(), toLocalResource(e.getValue().getAsJsonObject()));
      }
    }
    Map<String, String> env = new HashMap<>();
    if (spec.has("env")) {
      for (Map.Entry<String, JsonElement> e : spec.getAsJsonObject("env").entrySet()) {
        env.put(e.getKey(), e.getValue().getAsString());
      }
    }
    List<String> commands = new ArrayList<>();
    if (spec.has("commands")) {
      for (JsonElement c : spec.getAsJsonArray("commands")) {
        commands.add(c.getAsString());
      }
    }
    return ContainerLaunchContext.newInstance(resources, env, commands, null, tokens, null);
  }

  static LocalResource toLocalResource(JsonObject r) throws URISyntaxException {
    // Size and timestamp must be exactly the FileStatus values: the NodeManager refuses a
    // resource whose file changed since submission.
    return LocalResource.newInstance(
        URL.fromPath(new Path(Json.str(r, "path", null))),
        LocalResourceType.valueOf(Json.str(r, "type", "FILE")),
        LocalResourceVisibility.valueOf(Json.str(r, "visibility", "APPLICATION")),
        Json.num(r, "size", -1),
        Json.num(r, "mtime", -1));
  }
}
