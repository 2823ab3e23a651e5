//! A line diff of a node's netplan file as it is and as `fabric apply` would write it
//! (`apply --dry-run`), in unified style with whole-file context (the files are short). Pure.

/// `--- OLD` / `+++ NEW` headers, then every line prefixed with ` `, `-` or `+`. `old` is
/// `None` when the file does not exist yet.
pub fn unified(path: &str, old: Option<&str>, new: &str) -> String {
    let a: Vec<&str> = old.map(|o| o.lines().collect()).unwrap_or_default();
    let b: Vec<&str> = new.lines().collect();
    let mut out = format!(
        "--- {}\n+++ {path}\n",
        if old.is_some() { path } else { "/dev/null" }
    );
    // Longest common subsequence, table from the end.
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            out.push_str(&format!(" {}\n", a[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push_str(&format!("-{}\n", a[i]));
            i += 1;
        } else {
            out.push_str(&format!("+{}\n", b[j]));
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_file_is_all_additions_and_a_change_shows_both_lines() {
        assert_eq!(
            unified("/etc/x.yaml", None, "a\nb\n"),
            "--- /dev/null\n+++ /etc/x.yaml\n+a\n+b\n"
        );
        assert_eq!(
            unified(
                "/etc/x.yaml",
                Some("a\nmtu: 1500\nc\n"),
                "a\nmtu: 9000\nc\n"
            ),
            "--- /etc/x.yaml\n+++ /etc/x.yaml\n a\n-mtu: 1500\n+mtu: 9000\n c\n"
        );
    }
}
