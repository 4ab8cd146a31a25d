"""The reasoning-gym generators posttrain registers, listed without importing reasoning-gym.

``GENERATORS[name] = (category, levels)``: ``category`` is reasoning-gym's own grouping (the
package a generator lives in: arithmetic, algebra, algorithmic, arc, code, cognition, games,
geometry, graphs, induction, logic, probability; ``composite`` mixes others); ``levels`` is how
many of its curriculum's global levels (0, 1, ...) build a configuration that validates and
generates, counted from 0 (0: no usable curriculum, the generator's default configuration is its
only level). Nine curricula break above some level in 0.1.25 (caesar_cipher from 2: a rotation
of 26; game_of_life from 1: its boards die out, so the empty board, written from the question's
size, was the answer of 20 of 24 tasks at level 1 and of every task above; game_of_life_halting from
2: its boards, 50 x 50 and up, are printed as numpy's "..." summary, no live cell shown, so every
answer was a coin flip (``_hardened._whole_board``); jugs from 3: no puzzle found; modulo_grid from 1: max_target 0; number_format from 3: its
candidates, within 1e-6 of each other, all show the answer to 3 decimals; rubiks_cube from 1: cubes
above 3x3 get no example answer, and the scorer drops the layered moves that would solve them, so no
task has a reference that stands; survo from 2: 10 empty cells; knight_swap at every level:
min_nodes 4), so their ranges stop there. tests/envs/test_rg.py checks this table against the installed package.
"""

from __future__ import annotations

VERSION = "0.1.25"
"""The reasoning-gym release this table was read from (its ``__version__`` says 0.1.19)."""

GENERATORS: dict[str, tuple[str, int]] = {
    "ab": ("algorithmic", 4),
    "acre": ("induction", 0),
    "advanced_geometry": ("geometry", 4),
    "aiw": ("logic", 9),
    "arc_1d": ("arc", 4),
    "arc_agi": ("arc", 4),
    "base_conversion": ("algorithmic", 5),
    "basic_arithmetic": ("arithmetic", 5),
    "bf": ("code", 3),
    "binary_alternation": ("algorithmic", 4),
    "binary_matrix": ("algorithmic", 4),
    "bitwise_arithmetic": ("arithmetic", 10),
    "boxnet": ("games", 9),
    "caesar_cipher": ("algorithmic", 2),
    "calendar_arithmetic": ("arithmetic", 4),
    "chain_sum": ("arithmetic", 11),
    "circuit_logic": ("logic", 5),
    "codeio": ("code", 4),
    "coin_flip": ("probability", 13),
    "color_cube_rotation": ("cognition", 5),
    "complex_arithmetic": ("algebra", 4),
    "composite": ("composite", 0),
    "count_bits": ("arithmetic", 5),
    "count_primes": ("algorithmic", 5),
    "countdown": ("games", 5),
    "course_schedule": ("graphs", 5),
    "cryptarithm": ("algorithmic", 4),
    "decimal_arithmetic": ("arithmetic", 4),
    "decimal_chain_sum": ("arithmetic", 5),
    "dice": ("arithmetic", 4),
    "emoji_mystery": ("games", 6),
    "family_relationships": ("graphs", 9),
    "figlet_font": ("cognition", 6),
    "fraction_simplification": ("arithmetic", 4),
    "futoshiki": ("games", 4),
    "game_of_life": ("algorithmic", 1),
    "game_of_life_halting": ("algorithmic", 2),
    "gcd": ("arithmetic", 4),
    "graph_color": ("algorithmic", 4),
    "group_anagrams": ("algorithmic", 4),
    "gsm_symbolic": ("arithmetic", 0),
    "intermediate_integration": ("algebra", 8),
    "isomorphic_strings": ("algorithmic", 4),
    "jugs": ("algorithmic", 3),
    "kakurasu": ("games", 4),
    "knight_swap": ("games", 0),
    "knights_knaves": ("logic", 4),
    "largest_island": ("graphs", 4),
    "lcm": ("arithmetic", 4),
    "leg_counting": ("arithmetic", 36),
    "letter_counting": ("algorithmic", 8),
    "letter_jumble": ("algorithmic", 5),
    "list_functions": ("induction", 0),
    "mahjong_puzzle": ("games", 4),
    "manipulate_matrix": ("algorithmic", 5),
    "maze": ("games", 4),
    "mini_sudoku": ("games", 5),
    "modulo_grid": ("cognition", 1),
    "n_queens": ("games", 5),
    "needle_haystack": ("cognition", 4),
    "number_filtering": ("algorithmic", 4),
    "number_format": ("arithmetic", 3),
    "number_sequence": ("cognition", 4),
    "number_sorting": ("algorithmic", 8),
    "palindrome_generation": ("algorithmic", 4),
    "palindrome_partitioning": ("algorithmic", 4),
    "path_star": ("graphs", 4),
    "polynomial_equations": ("algebra", 4),
    "polynomial_multiplication": ("algebra", 4),
    "pool_matrix": ("algorithmic", 4),
    "power_function": ("arithmetic", 5),
    "prime_factorization": ("arithmetic", 4),
    "products": ("arithmetic", 11),
    "propositional_logic": ("logic", 5),
    "puzzle24": ("games", 7),
    "quantum_lock": ("graphs", 10),
    "ransom_note": ("algorithmic", 4),
    "rearc": ("arc", 7),
    "rectangle_count": ("cognition", 5),
    "rotate_matrix": ("algorithmic", 5),
    "rotten_oranges": ("algorithmic", 4),
    "rubiks_cube": ("cognition", 1),
    "rush_hour": ("games", 4),
    "self_reference": ("logic", 10),
    "sentence_reordering": ("algorithmic", 4),
    "shortest_path": ("graphs", 4),
    "simple_equations": ("algebra", 4),
    "simple_geometry": ("geometry", 4),
    "simple_integration": ("algebra", 4),
    "sokoban": ("games", 14),
    "spell_backward": ("algorithmic", 5),
    "spiral_matrix": ("algorithmic", 4),
    "string_insertion": ("algorithmic", 4),
    "string_manipulation": ("algorithmic", 5),
    "string_splitting": ("algorithmic", 4),
    "string_synthesis": ("algorithmic", 4),
    "sudoku": ("games", 5),
    "survo": ("games", 2),
    "syllogism": ("logic", 4),
    "time_intervals": ("arithmetic", 7),
    "tower_of_hanoi": ("games", 4),
    "tsumego": ("games", 4),
    "word_ladder": ("algorithmic", 3),
    "word_sequence_reversal": ("algorithmic", 4),
    "word_sorting": ("algorithmic", 5),
    "zebra_puzzles": ("logic", 6),
}

LOWEST_LEVEL: dict[str, int] = {"propositional_logic": 1, "sokoban": 1}
"""Generators whose lowest curriculum levels make no task posttrain keeps (``_hardened.Rule.keep``), or
make one too slowly to train on: propositional_logic's level 0 (two variables, two premises) has no
premises from which a clause follows only together (0 of 300 drawn); sokoban's level 0 (a 6 x 6 board
with at least 4 boxes) took 16-59 s for two tasks on one core (seeds 3, 4, 11; its level 1, boards
6-7 wide, 0.1-0.9 s), so a pool or curriculum starting there stalled."""

NO_CANARIES = frozenset({
    "acre",
    "aiw",
    "binary_alternation",
    "calendar_arithmetic",
    "circuit_logic",
    "coin_flip",
    "color_cube_rotation",
    "count_bits",
    "course_schedule",
    "family_relationships",
    "game_of_life_halting",
    "gcd",
    "isomorphic_strings",
    "largest_island",
    "letter_counting",
    "mahjong_puzzle",
    "maze",
    "propositional_logic",
    "ransom_note",
    "rectangle_count",
    "rotten_oranges",
    "self_reference",
    "shortest_path",
    "syllogism",
    "zebra_puzzles",
})
"""Generators whose answers are too few for a canary: under 75% of 32 generated answers distinct
(Yes/No, small counts, a handful of paths), so a planted answer is a guess away and a pass would be
a false alarm. Their domains offer no canaries (tests/envs/test_rg.py re-measures a sample)."""

FEW_ANSWERS = NO_CANARIES - {"propositional_logic"}
"""Generators whose stored answer is one of few (``NO_CANARIES`` less propositional_logic, which stores
none and passes any clause that follows only together): told "wrong", the answer is among fewer left,
and a repair episode paid the next guess in full. Cycling the answers blind passed 100 of 100 repair
episodes of syllogism, course_schedule, game_of_life_halting, isomorphic_strings, ransom_note and
circuit_logic with 2 attempts (50 on the first), of acre and mahjong_puzzle with 3 (34 on the first), and
the commonest three answers, one an attempt, passed 891 of 1440 three-attempt episodes over all 24
generators here (60 default tasks each; 375 on the first attempt; letter_counting 43 of 60 against 14,
gcd 39 against 15, shortest_path least: 17 against 15). A wrong answer to one of their
tasks therefore ends its repair episode (``_check.handle_check``: ``evidence["final"]``,
``Verdict.ends_repair``): repair stays open only where an answer is not a guess away. Not covered: a
generator whose answers are few only at some level other than the default one (the table was measured at
the default configuration, as ``NO_CANARIES``)."""
