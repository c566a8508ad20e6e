package io.tonypy.bridge;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;

/**
 * JSON across the Py4J boundary: one string per call instead of a round trip per field.
 */
public final class Json {
  private static final Gson GSON = new GsonBuilder().disableHtmlEscaping().serializeNulls().create();

  private Json() {}

  public static String write(Object value) {
    return GSON.toJson(value);
  }

  public static JsonObject parse(String text) {
    return JsonParser.parseString(text).getAsJsonObject();
  }

  public static String str(JsonObject obj, String key, String dflt) {
    return obj.has(key) && !obj.get(key).isJsonNull() ? obj.get(key).getAsString() : dflt;
  }

  public static java.util.List<String> strings(JsonObject obj, String key) {
    java.util.List<String> out = new java.util.ArrayList<>();
    if (obj.has(key) && obj.get(key).isJsonArray()) {
      obj.getAsJsonArray(key).forEach(e -> out.add(e.getAsString()));
    }
    return out;
  }

  public static long num(JsonObject obj, String key, long dflt) {
    return obj.has(key) && !obj.get(key).isJsonNull() ? obj.get(key).getAsLong() : dflt;
  }
}
