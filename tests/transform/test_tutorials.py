"""The PyTorch NLP tutorials' per-example code, as written there, on
batches of strings (issue 29 / SPEC 4b).

Tensors the per-example code builds item by item: the char-RNN tutorials'
``categoryTensor`` / ``lineToTensor`` make a zero Tensor and write a 1 at
``tensor[li][0][all_letters.find(letter)]`` (chained subscripts, a
per-example index from a shared string's method) for each example's own
strings; the name generator's ``sample`` picks letters by a per-example
index into a shared string and stops at its own end.  Each example then
gets its own Tensor, as it does run alone.  The seq2seq tutorial's
``evaluate`` turns a sentence string into indices through a ``Lang``
object's dict, fills ``encoder_outputs[ei] += ...``, decodes until each
example's own end and returns each example's list of words and its
attentions cut at its own step ``[:di + 1]``.  Values and gradients equal
the per-example runs."""
import string

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import matchbox
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test

D = torch.float64
all_letters = string.ascii_letters + " .,;'-"
n_letters = len(all_letters) + 1
all_categories = ["English", "French", "German"]


def categoryTensor(category):
    li = all_categories.index(category)
    tensor = torch.zeros(1, len(all_categories), dtype=D)
    tensor[0][li] = 1
    return tensor


def lineToTensor(line):
    tensor = torch.zeros(len(line), 1, n_letters, dtype=D)
    for li, letter in enumerate(line):
        tensor[li][0][all_letters.find(letter)] = 1
    return tensor


class RNN(nn.Module):
    def __init__(self, hidden_size=8):
        super().__init__()
        torch.manual_seed(0)
        self.hidden_size = hidden_size
        self.i2h = nn.Linear(len(all_categories) + n_letters + hidden_size, hidden_size)
        self.i2o = nn.Linear(len(all_categories) + n_letters + hidden_size, n_letters)
        self.softmax = nn.LogSoftmax(dim=1)

    def step(self, category, input, hidden):
        combined = torch.cat((category, input, hidden), 1)
        return self.softmax(self.i2o(combined)), torch.tanh(self.i2h(combined))

    @matchbox.batch
    def forward(self, category, line, x):            # category, line: strings; x: (1, 1)
        category_tensor = categoryTensor(category)
        line_tensor = lineToTensor(line)
        hidden = x.new_zeros(1, self.hidden_size) + x
        for i in range(line_tensor.size(0)):
            output, hidden = self.step(category_tensor, line_tensor[i], hidden)
        return output, line_tensor.sum(0)


LINES = ["Abe", "Zo", "Quinn-Lee", "B", "Oda", "Jean;"]
CATS = ["English", "French", "German", "French", "English", "German"]


@pytest.mark.parametrize("B", [1, 3, 6])
def test_one_hot_tensors_built_per_example(B):
    """Before: 'assigning per-example values (a MaskedBatch) into a plain
    Tensor would write every example into the same shared Tensor', then
    'must be str, not PerExample' from all_letters.find(letter)."""
    mb_test(RNN().double(), matchbox.objects(CATS[:B]), matchbox.objects(LINES[:B]),
            (B, (False, 1)), dtype=D)


def test_equal_lines():
    mb_test(RNN().double(), matchbox.objects(["German"] * 3), matchbox.objects(["Ann"] * 3),
            (3, (False, 1)), dtype=D)


torch.manual_seed(1)
_GEN = RNN(hidden_size=6).double()


@matchbox.batch
def sample(category, start_letter, max_length=6):
    with torch.no_grad():
        category_tensor = categoryTensor(category)
        input = lineToTensor(start_letter)
        hidden = torch.zeros(1, _GEN.hidden_size, dtype=D)
        output_name = start_letter
        for i in range(max_length):
            output, hidden = _GEN.step(category_tensor, input[0], hidden)
            topv, topi = output.topk(1)
            topi = topi[0][0]
            if topi == n_letters - 1 or topi % 3 == 1:   # (stops early for some)
                break
            else:
                letter = all_letters[topi]
                output_name += letter
            input = lineToTensor(letter)
        return output_name


def test_sampling_names_per_example():
    cats, starts = ["English", "French", "German", "French"], ["A", "B", "C", "Q"]
    alone = [sample.__wrapped__(c, s) for c, s in zip(cats, starts)]
    names = sample(matchbox.objects(cats), matchbox.objects(starts))
    assert matchbox.examples(names) == alone, (names, alone)
    mb_test(sample, matchbox.objects(cats), matchbox.objects(starts))


# ------------------------------------------------------------------ seq2seq
SOS_token, EOS_token, MAX_LENGTH = 0, 1, 8


class Lang:
    def __init__(self, name):
        self.name = name
        self.word2index = {}
        self.index2word = {0: "SOS", 1: "EOS"}
        self.n_words = 2

    def addSentence(self, sentence):
        for word in sentence.split(' '):
            if word not in self.word2index:
                self.word2index[word] = self.n_words
                self.index2word[self.n_words] = word
                self.n_words += 1


def tensorFromSentence(lang, sentence):
    indexes = [lang.word2index[word] for word in sentence.split(' ')]
    indexes.append(EOS_token)
    return torch.tensor(indexes, dtype=torch.long).view(-1, 1)


class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size):
        super(EncoderRNN, self).__init__()
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size)

    def forward(self, input, hidden):
        embedded = self.embedding(input).view(1, 1, -1)
        output, hidden = self.gru(embedded, hidden)
        return output, hidden

    def initHidden(self):
        return torch.zeros(1, 1, self.hidden_size, dtype=D)


class AttnDecoderRNN(nn.Module):
    def __init__(self, hidden_size, output_size, max_length=MAX_LENGTH):
        super(AttnDecoderRNN, self).__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.attn = nn.Linear(hidden_size * 2, max_length)
        self.attn_combine = nn.Linear(hidden_size * 2, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size)
        self.out = nn.Linear(hidden_size, output_size)

    def forward(self, input, hidden, encoder_outputs):
        embedded = self.embedding(input).view(1, 1, -1)
        attn_weights = F.softmax(self.attn(torch.cat((embedded[0], hidden[0]), 1)), dim=1)
        attn_applied = torch.bmm(attn_weights.unsqueeze(0), encoder_outputs.unsqueeze(0))
        output = torch.cat((embedded[0], attn_applied[0]), 1)
        output = F.relu(self.attn_combine(output).unsqueeze(0))
        output, hidden = self.gru(output, hidden)
        output = F.log_softmax(self.out(output[0]), dim=1)
        return output, hidden, attn_weights


SENTS = ["je suis grand", "il est la", "nous sommes ici tous", "elle", "je suis la ici"]
input_lang, output_lang = Lang("fra"), Lang("eng")
for _s in SENTS:
    input_lang.addSentence(_s)
for _s in ["i am big", "he is here", "we are all here", "she", "i am here"]:
    output_lang.addSentence(_s)


class Translator(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.encoder = EncoderRNN(input_lang.n_words, 6).double()
        self.decoder = AttnDecoderRNN(6, output_lang.n_words).double()

    @matchbox.batch
    def forward(self, sentence, max_length=MAX_LENGTH):
        encoder, decoder = self.encoder, self.decoder
        input_tensor = tensorFromSentence(input_lang, sentence)
        input_length = input_tensor.size()[0]
        encoder_hidden = encoder.initHidden()
        encoder_outputs = torch.zeros(max_length, 6, dtype=D)
        for ei in range(input_length):
            encoder_output, encoder_hidden = encoder(input_tensor[ei], encoder_hidden)
            encoder_outputs[ei] += encoder_output[0, 0]
        decoder_input = torch.tensor([[SOS_token]])
        decoder_hidden = encoder_hidden
        decoded_words = []
        decoder_attentions = torch.zeros(max_length, max_length, dtype=D)
        loss = 0
        for di in range(max_length):
            decoder_output, decoder_hidden, decoder_attention = decoder(
                decoder_input, decoder_hidden, encoder_outputs)
            decoder_attentions[di] = decoder_attention.data
            loss += -decoder_output[0, 2]
            topv, topi = decoder_output.data.topk(1)
            if topi.item() == EOS_token or di + 2 >= input_length:   # (each at its own step)
                decoded_words.append('<EOS>')
                break
            else:
                decoded_words.append(output_lang.index2word[topi.item()])
            decoder_input = topi.squeeze().detach()
        return decoded_words, decoder_attentions[:di + 1], loss / (di + 1)


def test_seq2seq_evaluate_on_sentence_strings():
    """Before: a plain str appended to a per-example list under lanes
    ('two examples hold the same object') and the attention buffer's
    per-example rows."""
    model = Translator()
    alone = [model(s) for s in SENTS]
    assert len({len(a[0]) for a in alone}) > 1   # the examples stop at different steps
    words, att, loss = model(matchbox.objects(SENTS))
    assert matchbox.examples(words) == [a[0] for a in alone]
    for e, a in zip(matchbox.examples(att), alone):
        torch.testing.assert_close(e, a[1])
    mb_test(model, matchbox.objects(SENTS))


# ------------------------------------------------------------------ BiLSTM-CRF
# "Advanced: Making Dynamic Decisions and the Bi-LSTM CRF", as written there
# (but for @matchbox.batch on the two entry points and a zero initial state)
START_TAG, STOP_TAG = "<START>", "<STOP>"

def argmax(vec):
    _, idx = torch.max(vec, 1)
    return idx.item()

def prepare_sequence(seq, to_ix):
    idxs = [to_ix[w] for w in seq]
    return torch.tensor(idxs, dtype=torch.long)

def log_sum_exp(vec):
    max_score = vec[0, argmax(vec)]
    max_score_broadcast = max_score.view(1, -1).expand(1, vec.size()[1])
    return max_score + torch.log(torch.sum(torch.exp(vec - max_score_broadcast)))

class BiLSTM_CRF(nn.Module):
    def __init__(self, vocab_size, tag_to_ix, embedding_dim, hidden_dim):
        super(BiLSTM_CRF, self).__init__()
        self.embedding_dim = embedding_dim
        self.hidden_dim = hidden_dim
        self.vocab_size = vocab_size
        self.tag_to_ix = tag_to_ix
        self.tagset_size = len(tag_to_ix)
        self.word_embeds = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim // 2, num_layers=1, bidirectional=True)
        self.hidden2tag = nn.Linear(hidden_dim, self.tagset_size)
        self.transitions = nn.Parameter(torch.randn(self.tagset_size, self.tagset_size))
        self.transitions.data[tag_to_ix[START_TAG], :] = -10000
        self.transitions.data[:, tag_to_ix[STOP_TAG]] = -10000
        self.hidden = self.init_hidden()

    def init_hidden(self):   # (the tutorial draws it with torch.randn: no per-example meaning)
        return (torch.zeros(2, 1, self.hidden_dim // 2), torch.zeros(2, 1, self.hidden_dim // 2))

    def _forward_alg(self, feats):
        init_alphas = torch.full((1, self.tagset_size), -10000.)
        init_alphas[0][self.tag_to_ix[START_TAG]] = 0.
        forward_var = init_alphas
        for feat in feats:
            alphas_t = []
            for next_tag in range(self.tagset_size):
                emit_score = feat[next_tag].view(1, -1).expand(1, self.tagset_size)
                trans_score = self.transitions[next_tag].view(1, -1)
                next_tag_var = forward_var + trans_score + emit_score
                alphas_t.append(log_sum_exp(next_tag_var).view(1))
            forward_var = torch.cat(alphas_t).view(1, -1)
        terminal_var = forward_var + self.transitions[self.tag_to_ix[STOP_TAG]]
        alpha = log_sum_exp(terminal_var)
        return alpha

    def _get_lstm_features(self, sentence):
        self.hidden = self.init_hidden()
        embeds = self.word_embeds(sentence).view(len(sentence), 1, -1)
        lstm_out, self.hidden = self.lstm(embeds, self.hidden)
        lstm_out = lstm_out.view(len(sentence), self.hidden_dim)
        lstm_feats = self.hidden2tag(lstm_out)
        return lstm_feats

    def _score_sentence(self, feats, tags):
        score = torch.zeros(1)
        tags = torch.cat([torch.tensor([self.tag_to_ix[START_TAG]], dtype=torch.long), tags])
        for i, feat in enumerate(feats):
            score = score + self.transitions[tags[i + 1], tags[i]] + feat[tags[i + 1]]
        score = score + self.transitions[self.tag_to_ix[STOP_TAG], tags[-1]]
        return score

    def _viterbi_decode(self, feats):
        backpointers = []
        init_vvars = torch.full((1, self.tagset_size), -10000.)
        init_vvars[0][self.tag_to_ix[START_TAG]] = 0
        forward_var = init_vvars
        for feat in feats:
            bptrs_t = []
            viterbivars_t = []
            for next_tag in range(self.tagset_size):
                next_tag_var = forward_var + self.transitions[next_tag]
                best_tag_id = argmax(next_tag_var)
                bptrs_t.append(best_tag_id)
                viterbivars_t.append(next_tag_var[0][best_tag_id].view(1))
            forward_var = (torch.cat(viterbivars_t) + feat).view(1, -1)
            backpointers.append(bptrs_t)
        terminal_var = forward_var + self.transitions[self.tag_to_ix[STOP_TAG]]
        best_tag_id = argmax(terminal_var)
        path_score = terminal_var[0][best_tag_id]
        best_path = [best_tag_id]
        for bptrs_t in reversed(backpointers):
            best_tag_id = bptrs_t[best_tag_id]
            best_path.append(best_tag_id)
        start = best_path.pop()
        assert start == self.tag_to_ix[START_TAG]  # Sanity check
        best_path.reverse()
        return path_score, best_path

    @matchbox.batch
    def neg_log_likelihood(self, sentence, tags):
        feats = self._get_lstm_features(sentence)
        forward_score = self._forward_alg(feats)
        gold_score = self._score_sentence(feats, tags)
        return forward_score - gold_score

    @matchbox.batch
    def forward(self, sentence):
        lstm_feats = self._get_lstm_features(sentence)
        score, tag_seq = self._viterbi_decode(lstm_feats)
        return score, tag_seq

training_data = [(
    "the wall street journal reported today that apple corporation made money".split(),
    "B I I I O O O B I O O".split()
), (
    "georgia tech is a university in georgia".split(),
    "B I O O O O B".split()
), ("apple made money".split(), "B O O".split()), ("today".split(), "O".split())]
word_to_ix = {}
for sentence, tags in training_data:
    for word in sentence:
        if word not in word_to_ix:
            word_to_ix[word] = len(word_to_ix)
tag_to_ix = {"B": 0, "I": 1, "O": 2, START_TAG: 3, STOP_TAG: 4}


@pytest.mark.parametrize("B", [1, 2, 4])
def test_bilstm_crf_tutorial(B):
    """Its helpers (log_sum_exp calling argmax's idx.item()), a table read
    at two per-example ints (self.transitions[tags[i + 1], tags[i]]), the
    Viterbi back-pointers as Python lists of ints, best_path.pop(), an
    assert, best_path.reverse(): negative log-likelihood (values and
    gradients) and decoding equal the per-example runs."""
    torch.manual_seed(1)
    model = BiLSTM_CRF(len(word_to_ix), tag_to_ix, 5, 4)
    data = (training_data * 2)[:B]
    sents = MaskedBatch.fromlist([prepare_sequence(s, word_to_ix) for s, _ in data], batch_dim=None)
    tags = MaskedBatch.fromlist([torch.tensor([tag_to_ix[t] for t in ts]) for _, ts in data],
                                batch_dim=None)
    mb_test(model.neg_log_likelihood, sents, tags, params=list(model.parameters()))
    mb_test(model, sents, grad=False)
