package dev.modelgate;

/**
 * ScanReport is what {@link ModelGate#scan(java.nio.file.Path, java.nio.file.Path)} judged: the
 * modelgate.report/v1 JSON document {@code modelgate scan -f json} (or {@code check --policy})
 * writes, byte for byte, and whether every file passed.
 */
public final class ScanReport {
  private final String json;
  private final int verdict;

  ScanReport(String json, int verdict) {
    this.json = json;
    this.verdict = verdict;
  }

  /** json is the report document; parse it with any JSON library. */
  public String json() {
    return json;
  }

  /** passed is true when every file passed (the program's exit 0), false when one was rejected. */
  public boolean passed() {
    return verdict == 0;
  }

  /** verdict is the program's exit code: 0 every file passed, 1 a file was rejected. */
  public int verdict() {
    return verdict;
  }
}
