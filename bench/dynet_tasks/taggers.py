"""The BiLSTM tagger and the BiLSTM tagger with a character BiLSTM over rare
words in DyNet (as dynet-benchmark's bilstm-tagger.py and
bilstm-tagger-withchar.py), built from ``examples.bilstm_tagger.Tagger`` /
``examples.char_tagger.CharTagger``.  A sentence is Python lists: word ids
and tags, and for the char tagger each word's letters (blanks removed)."""
from bench.dynet_tasks import BiLSTM, Linear, dy, lookup, lstm


class Tagger:
    def __init__(self, pc, tagger):
        self.embed = lookup(pc, tagger.embed)
        self.bilstm = BiLSTM(pc, tagger.bilstm)
        self.hidden, self.out = Linear(pc, tagger.mlp[0]), Linear(pc, tagger.mlp[2])

    def word_vectors(self, sentence):
        return [self.embed[w] for w in sentence[0]]

    def sentence_loss(self, sentence):
        """The summed cross entropy of the sentence's tags."""
        tags = sentence[-1]
        states = self.bilstm(self.word_vectors(sentence))
        return dy.esum([dy.pickneglogsoftmax(self.out(dy.tanh(self.hidden(h))), t)
                        for h, t in zip(states, tags)])

    def losses(self, sentences):
        return [self.sentence_loss(s) for s in sentences]


class CharTagger(Tagger):
    """A frequent word (id < ``frequent``) is a row of the table; a rare one
    is spelled by the character LSTMs: the states after its last letter
    each way, through ``tanh(char_out(.))``."""

    def __init__(self, pc, tagger):
        super().__init__(pc, tagger)
        self.frequent = tagger.frequent
        self.char_embed = lookup(pc, tagger.char_embed)
        self.char_fwd, self.char_bwd = (lstm(pc, c) for c in (tagger.char_fwd, tagger.char_bwd))
        self.char_out = Linear(pc, tagger.char_out)

    def spell(self, letters):
        xs = [self.char_embed[c] for c in letters]
        ahead = self.char_fwd.initial_state().transduce(xs)[-1]
        back = self.char_bwd.initial_state().transduce(xs[::-1])[-1]
        return dy.tanh(self.char_out(dy.concatenate([ahead, back])))

    def word_vectors(self, sentence):
        words, spellings = sentence[0], sentence[1]
        return [self.embed[w] if w < self.frequent else self.spell(letters)
                for w, letters in zip(words, spellings)]
