//! Symbolic shape arithmetic, conservative by design: two dims agree only when they are the
//! same constant or the same symbol.

use crate::isa::{Dim, Shape, SymId};

/// Numpy broadcasting of two shapes (aligned at the last axis; a size broadcasts only when it
/// is the constant 1). On failure, the offending pair as (axis from the right, a's, b's).
pub fn broadcast(a: &[Dim], b: &[Dim]) -> Result<Shape, (usize, Dim, Dim)> {
    let n = a.len().max(b.len());
    let mut out = Vec::with_capacity(n);
    for k in 0..n {
        // k counts from the right.
        let x = a.len().checked_sub(k + 1).and_then(|i| a.get(i)).copied();
        let y = b.len().checked_sub(k + 1).and_then(|i| b.get(i)).copied();
        let d = match (x, y) {
            (Some(x), None) => x,
            (None, Some(y)) => y,
            (Some(x), Some(y)) if x == y => x,
            (Some(Dim::Const(1)), Some(y)) => y,
            (Some(x), Some(Dim::Const(1))) => x,
            (Some(x), Some(y)) => return Err((k, x, y)),
            (None, None) => Dim::Const(1),
        };
        out.push(d);
    }
    out.reverse();
    Ok(out)
}

/// Whether `small` broadcasts to exactly `target` (numpy rules, `target` unchanged).
pub fn broadcasts_to(small: &[Dim], target: &[Dim]) -> bool {
    small.len() <= target.len() && broadcast(small, target).is_ok_and(|s| s == target)
}

/// An element count as a monomial: constant product times a multiset of symbols.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Count {
    /// The product of the constant dims (saturating; the verifier rejects tensors whose
    /// constant part overflows before it compares counts).
    pub constant: u64,
    /// Sorted symbol ids (empty when `constant` is 0: a zero-size tensor).
    pub syms: Vec<SymId>,
}

pub fn count(shape: &[Dim]) -> Count {
    let mut constant: u64 = 1;
    let mut syms = Vec::new();
    for d in shape {
        match *d {
            Dim::Const(n) => constant = constant.saturating_mul(n as u64),
            Dim::Sym(s) => syms.push(s),
        }
    }
    if constant == 0 {
        syms.clear();
    }
    syms.sort();
    Count { constant, syms }
}

/// Normalizes an axis (negative counts from the end) for a tensor of rank `rank`.
pub fn norm_axis(axis: i8, rank: usize) -> Option<usize> {
    if axis < 0 {
        rank.checked_sub(axis.unsigned_abs() as usize)
    } else if (axis as usize) < rank {
        Some(axis as usize)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting() {
        let b = Dim::Sym(SymId(0));
        let c = Dim::Const;
        assert_eq!(broadcast(&[b, c(1)], &[c(4)]), Ok(vec![b, c(4)]));
        assert_eq!(broadcast(&[c(1)], &[b]), Ok(vec![b]));
        assert!(broadcast(&[c(3)], &[c(4)]).is_err());
        assert!(broadcast(&[b], &[Dim::Sym(SymId(1))]).is_err());
        assert!(broadcasts_to(&[c(4)], &[b, c(4)]));
        assert!(!broadcasts_to(&[b, c(4)], &[c(4)]));
    }

    #[test]
    fn counts() {
        let b = Dim::Sym(SymId(0));
        let t = Dim::Sym(SymId(1));
        assert_eq!(count(&[b, Dim::Const(6), t]), count(&[t, Dim::Const(2), b, Dim::Const(3)]));
        assert_ne!(count(&[b, b]), count(&[b]));
        assert_eq!(count(&[b, Dim::Const(0)]), count(&[Dim::Const(0)]));
        assert_eq!(norm_axis(-1, 3), Some(2));
        assert_eq!(norm_axis(-4, 3), None);
        assert_eq!(norm_axis(3, 3), None);
        assert_eq!(norm_axis(0, 0), None);
    }
}
