//! Shared prompt prefixes (guard.md §7): a scan's nine prompts share the system line and the
//! conversation, so their token sequences are arranged in a tree whose nodes are computed once
//! and forked (KV-cache fork) where the prompts diverge.
//!
//! The split is made on token ids, not on text: BPE may tokenize a text prefix differently from
//! the same characters inside the whole prompt, whereas a common prefix of the full prompts'
//! token sequences is exact by construction. In the 3.0/3.2 layouts the nine prompts diverge in
//! the first sentence or the definition; in 3.3 only the judge protocol block differs.

use crate::tokenizer::TokenId;

/// One run of tokens shared by every prompt below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixNode {
    /// The node this one continues (its tokens come right after the parent's); `None` at a root.
    pub parent: Option<usize>,
    /// Position of `tokens[0]` in each prompt through this node (= total length of its ancestors).
    pub start: usize,
    pub tokens: Vec<TokenId>,
    /// The prompts (indices into the input) that end with this node's last token: their answer
    /// position is the node's last position.
    pub ends: Vec<usize>,
    pub children: Vec<usize>,
}

/// Prompts arranged by shared prefixes. Nodes are in topological order (a parent before its
/// children), so one pass can compute each node after forking its parent's sequence.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PrefixTree {
    pub nodes: Vec<PrefixNode>,
}

impl PrefixTree {
    /// Builds the tree of `prompts` (token sequences). Identical prompts end at the same node; a
    /// prompt that is a prefix of another ends at an inner node.
    pub fn build<P: AsRef<[TokenId]>>(prompts: &[P]) -> PrefixTree {
        let seqs: Vec<&[TokenId]> = prompts.iter().map(AsRef::as_ref).collect();
        let mut tree = PrefixTree::default();
        let all: Vec<usize> = (0..seqs.len()).collect();
        tree.grow(&seqs, all, 0, None);
        tree
    }

    /// The roots' nodes (more than one when the prompts share no first token).
    pub fn roots(&self) -> impl Iterator<Item = usize> + '_ {
        self.nodes.iter().enumerate().filter(|(_, n)| n.parent.is_none()).map(|(i, _)| i)
    }

    /// Total tokens to compute with sharing (versus the sum of the prompts' lengths without).
    pub fn shared_cost(&self) -> usize {
        self.nodes.iter().map(|n| n.tokens.len()).sum()
    }

    /// Adds the node for the prompts `group`, which all agree on their first `depth` tokens.
    fn grow(&mut self, seqs: &[&[TokenId]], group: Vec<usize>, depth: usize, parent: Option<usize>) {
        if group.is_empty() {
            return;
        }
        let first = seqs[group[0]];
        let mut end = depth;
        while end < first.len() && group.iter().all(|&i| seqs[i].get(end) == Some(&first[end])) {
            end += 1;
        }
        let (ends, rest): (Vec<usize>, Vec<usize>) = group.iter().partition(|&&i| seqs[i].len() == end);
        let node = if end > depth || (parent.is_none() && !ends.is_empty()) {
            let id = self.nodes.len();
            self.nodes.push(PrefixNode { parent, start: depth, tokens: first[depth..end].to_vec(), ends, children: Vec::new() });
            if let Some(p) = parent {
                self.nodes[p].children.push(id);
            }
            Some(id)
        } else {
            // No token in common beyond the parent: prompts that stop here end at the parent.
            if let Some(p) = parent {
                self.nodes[p].ends.extend(ends);
            }
            parent
        };
        // Group the longer prompts by their next token, in order of first appearance.
        let mut groups: Vec<(TokenId, Vec<usize>)> = Vec::new();
        for i in rest {
            let t = seqs[i][end];
            match groups.iter_mut().find(|(k, _)| *k == t) {
                Some((_, g)) => g.push(i),
                None => groups.push((t, vec![i])),
            }
        }
        for (_, g) in groups {
            self.grow(seqs, g, end, node);
        }
    }
}

/// Length of the longest common prefix of `prompts`, capped so that every prompt keeps at least
/// its last token outside the prefix (the answer position must be computed per prompt).
pub fn common_prefix_len<P: AsRef<[TokenId]>>(prompts: &[P]) -> usize {
    let Some(first) = prompts.first().map(AsRef::as_ref) else { return 0 };
    let mut n = prompts.iter().map(|p| p.as_ref().len()).min().unwrap_or(0).saturating_sub(1);
    for p in &prompts[1..] {
        n = first.iter().zip(p.as_ref()).take(n).take_while(|(a, b)| a == b).count();
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_prefix_keeps_a_last_token() {
        assert_eq!(common_prefix_len(&[vec![1, 2, 3, 4], vec![1, 2, 3, 5]]), 3);
        assert_eq!(common_prefix_len(&[vec![1, 2, 3], vec![1, 2, 3]]), 2);
        assert_eq!(common_prefix_len(&[vec![1, 2, 3], vec![9, 2, 3]]), 0);
        assert_eq!(common_prefix_len::<Vec<u32>>(&[]), 0);
    }

    #[test]
    fn tree_shares_prefixes_and_branches() {
        let prompts = vec![vec![1, 2, 3, 4], vec![1, 2, 3, 5, 6], vec![1, 2, 7], vec![1, 2, 3, 4], vec![1, 2]];
        let tree = PrefixTree::build(&prompts);
        let root = &tree.nodes[0];
        assert_eq!((root.parent, root.start, root.tokens.clone(), root.ends.clone()), (None, 0, vec![1, 2], vec![4]));
        // Every prompt is the concatenation of its node path and ends exactly once.
        let mut seen = vec![0; prompts.len()];
        for (id, node) in tree.nodes.iter().enumerate() {
            for &p in &node.ends {
                seen[p] += 1;
                let mut path = Vec::new();
                let mut cur = Some(id);
                while let Some(c) = cur {
                    path.splice(0..0, tree.nodes[c].tokens.iter().copied());
                    cur = tree.nodes[c].parent;
                }
                assert_eq!(path, prompts[p]);
            }
            if let Some(parent) = node.parent {
                assert!(parent < id, "parents come first");
                let p = &tree.nodes[parent];
                assert_eq!(node.start, p.start + p.tokens.len());
            }
        }
        assert_eq!(seen, vec![1; prompts.len()]);
        assert_eq!(tree.shared_cost(), 2 + 1 + 1 + 2 + 1); // [1,2] [3] [4] [5,6] [7]
    }

    #[test]
    fn disjoint_prompts_give_several_roots() {
        let tree = PrefixTree::build(&[vec![1, 2], vec![3, 4]]);
        assert_eq!(tree.roots().count(), 2);
    }
}
